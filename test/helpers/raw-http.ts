/**
 * HTTP at the socket level, for what a fetch client would hide: a replica that records the
 * exact request heads it receives and answers with whatever raw response a test gives it,
 * and a client that sends raw bytes and returns the raw response.
 */
import { connect } from "node:net";
import { WAIT_MS } from "./wait.ts";

export interface RawRequest {
  /** The request line and header lines as received, without the final blank line. */
  head: string;
  method: string;
  path: string;
  /** Header lines, lower-cased names, in order. */
  headers: [string, string][];
  body: Uint8Array;
  /** The connection it came on (numbered from 1 in the order they opened). */
  connection: number;
  /** That connection had carried a request before (a kept-alive one, reused). */
  reused: boolean;
}

export interface RawReplica {
  url: string;
  requests: RawRequest[];
  stop(): void;
}

/**
 * A replica on a loopback port: `respond` returns (or resolves to) the raw response for each
 * parsed request, or null to close the connection at once without a byte of answer.
 */
export function startRawReplica(respond: (req: RawRequest) => string | null | Promise<string | null>): RawReplica {
  const requests: RawRequest[] = [];
  let connections = 0;
  const server = Bun.listen<{ buffer: Buffer; id: number; served: number }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = { buffer: Buffer.alloc(0), id: ++connections, served: 0 };
      },
      data(socket, chunk) {
        socket.data.buffer = Buffer.concat([socket.data.buffer, chunk]);
        for (;;) {
          const buffer = socket.data.buffer;
          const end = buffer.indexOf("\r\n\r\n");
          if (end < 0) return;
          const head = buffer.subarray(0, end).toString("latin1");
          const [requestLine, ...lines] = head.split("\r\n");
          const headers = lines.map((l): [string, string] => {
            const colon = l.indexOf(":");
            return [l.slice(0, colon).toLowerCase(), l.slice(colon + 1).trim()];
          });
          const length = Number(headers.find(([k]) => k === "content-length")?.[1] ?? 0);
          if (buffer.length < end + 4 + length) return;
          const [method, path] = requestLine!.split(" ");
          const req = { head, method: method!, path: path!, headers, body: new Uint8Array(buffer.subarray(end + 4, end + 4 + length)), connection: socket.data.id, reused: socket.data.served++ > 0 };
          socket.data.buffer = buffer.subarray(end + 4 + length);
          requests.push(req);
          void Promise.resolve(respond(req)).then((response) => (response === null ? socket.terminate() : socket.write(response)));
        }
      },
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, requests, stop: () => server.stop(true) };
}

/** A raw HTTP/1.1 response with a correct Content-Length. */
export function rawResponse(status: string, headerLines: string[], body: string): string {
  return `HTTP/1.1 ${status}\r\n${[...headerLines, `Content-Length: ${Buffer.byteLength(body)}`].join("\r\n")}\r\n\r\n${body}`;
}

export interface RawResult {
  /** Everything received, as latin1 text. */
  text: string;
  /** The final (non-1xx) response's head and headers. */
  status: number;
  headers: [string, string][];
  body: string;
  /** How the exchange ended. */
  ended: "complete" | "closed" | "timeout";
}

/**
 * Send `data` on a fresh connection (in pieces with `gapMs` between them, when given as an
 * array) and read until one complete response (Content-Length or chunked), the server
 * closes, or `timeoutMs`.
 */
export function rawExchange(port: number, data: string | Uint8Array | (string | Uint8Array)[], options: { timeoutMs?: number; gapMs?: number } = {}): Promise<RawResult> {
  const { timeoutMs = WAIT_MS, gapMs = 0 } = options;
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    let received = Buffer.alloc(0);
    let settled = false;
    const settle = (ended: RawResult["ended"]) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ ...parseResponse(received.toString("latin1")), text: received.toString("latin1"), ended });
    };
    const timer = setTimeout(() => settle("timeout"), timeoutMs);
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (complete(received.toString("latin1"))) settle("complete");
    });
    socket.on("close", () => settle("closed"));
    socket.on("error", () => settle("closed"));
    socket.on("connect", async () => {
      const pieces = Array.isArray(data) ? data : [data];
      for (const [i, piece] of pieces.entries()) {
        if (settled) return;
        if (i > 0 && gapMs > 0) await Bun.sleep(gapMs);
        socket.write(piece);
      }
    });
  });
}

function finalResponse(text: string): { head: string; rest: string } | undefined {
  let rest = text;
  for (;;) {
    const end = rest.indexOf("\r\n\r\n");
    if (end < 0) return undefined;
    const head = rest.slice(0, end);
    rest = rest.slice(end + 4);
    if (!/^HTTP\/1\.[01] 1\d\d/.test(head)) return { head, rest };
  }
}

function complete(text: string): boolean {
  const response = finalResponse(text);
  if (!response) return false;
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(response.head);
  if (length) return Buffer.byteLength(response.rest, "latin1") >= Number(length[1]);
  if (/\r\ntransfer-encoding:\s*chunked/i.test(response.head)) return /(^|\r\n)0\r\n\r\n$/.test(response.rest);
  return false;
}

function parseResponse(text: string): Omit<RawResult, "text" | "ended"> {
  const response = finalResponse(text);
  if (!response) return { status: 0, headers: [], body: "" };
  const [statusLine, ...lines] = response.head.split("\r\n");
  const headers = lines.map((l): [string, string] => {
    const colon = l.indexOf(":");
    return [l.slice(0, colon).toLowerCase(), l.slice(colon + 1).trim()];
  });
  let body = response.rest;
  if (headers.some(([k, v]) => k === "transfer-encoding" && v.includes("chunked"))) body = dechunk(body);
  return { status: Number(statusLine!.split(" ")[1]), headers, body };
}

function dechunk(text: string): string {
  let out = "";
  let rest = text;
  for (;;) {
    const nl = rest.indexOf("\r\n");
    if (nl < 0) return out;
    const size = parseInt(rest.slice(0, nl), 16);
    if (!(size > 0)) return out;
    out += rest.slice(nl + 2, nl + 2 + size);
    rest = rest.slice(nl + 2 + size + 2);
  }
}
