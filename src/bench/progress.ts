/**
 * Progress on stderr while the bench runs: on a terminal, one status line rewritten in
 * place plus a line per finished arm; elsewhere (CI, a pipe) only the finished-arm lines,
 * so logs stay readable.
 */
import type { Progress } from "./run.ts";

export function stderrProgress(stream: { write(text: string): unknown; isTTY?: boolean } = process.stderr): Progress {
  const tty = Boolean(stream.isTTY);
  let shown = false;
  const clear = () => {
    if (shown) stream.write("\r\x1b[K");
    shown = false;
  };
  return {
    status(text) {
      if (!tty) return;
      const width = (process.stderr.columns ?? 100) - 1;
      stream.write(`\r\x1b[K${text.length > width ? `${text.slice(0, width - 1)}…` : text}`);
      shown = true;
    },
    line(text) {
      clear();
      stream.write(`${text}\n`);
    },
  };
}
