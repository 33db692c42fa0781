/**
 * Incremental server-sent-events parsing (pure): feed decoded text as it arrives, get the
 * `data` payload of every complete event. Network chunks split events anywhere, so the
 * parser keeps the incomplete remainder.
 */
export class SseParser {
  private buffer = "";
  private data: string[] = [];

  /** Feed text; returns the data payloads of the events it completed. */
  push(text: string): string[] {
    this.buffer += text;
    const out: string[] = [];
    let nl: number;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, nl).replace(/\r$/, "");
      this.buffer = this.buffer.slice(nl + 1);
      this.line(line, out);
    }
    return out;
  }

  /** End of stream: an event not closed by a blank line still counts. */
  end(): string[] {
    const out: string[] = [];
    if (this.buffer !== "") this.line(this.buffer.replace(/\r$/, ""), out);
    this.buffer = "";
    this.line("", out);
    return out;
  }

  private line(line: string, out: string[]): void {
    if (line === "") {
      if (this.data.length > 0) out.push(this.data.join("\n"));
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    if (field !== "data") return;
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    this.data.push(value);
  }
}
