/**
 * A loopback port that drops connection attempts, the way a vanished host or a firewall
 * does: a socket listens with a backlog of 0, one connection fills its accept queue and is
 * never accepted, and the kernel drops every SYN after it, so a connect() just waits.
 * Bun and Node accept every connection themselves, so the socket is made with libc through
 * bun:ffi. Linux (glibc) only: elsewhere this throws and says so.
 */
import { dlopen, FFIType, ptr } from "bun:ffi";
import { connect, type Socket } from "node:net";

export interface Blackhole {
  port: number;
  url: string;
  close(): void;
}

const AF_INET = 2;
const SOCK_STREAM = 1;
const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;

function libc() {
  if (process.platform !== "linux") throw new Error(`the blackhole test helper needs Linux (glibc); this is ${process.platform}`);
  return dlopen("libc.so.6", {
    socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
    bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
    listen: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    getsockname: { args: [FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
    close: { args: [FFIType.i32], returns: FFIType.i32 },
  }).symbols;
}

/** Open a blackhole on 127.0.0.1:`port` (0 = any free port). */
export async function blackhole(port = 0): Promise<Blackhole> {
  const c = libc();
  const fd = c.socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw new Error("blackhole: socket() failed");
  const one = new Int32Array([1]);
  c.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, ptr(one), 4);
  // struct sockaddr_in: family (host order), port and address (network order), padding
  const addr = new Uint8Array(16);
  new DataView(addr.buffer).setUint16(0, AF_INET, true);
  new DataView(addr.buffer).setUint16(2, port, false);
  addr.set([127, 0, 0, 1], 4);
  if (c.bind(fd, ptr(addr), 16) !== 0 || c.listen(fd, 0) !== 0) {
    c.close(fd);
    throw new Error(`blackhole: cannot listen on 127.0.0.1:${port}`);
  }
  const len = new Uint32Array([16]);
  c.getsockname(fd, ptr(addr), ptr(len));
  const bound = new DataView(addr.buffer).getUint16(2, false);
  // Fill the accept queue: from now on the kernel drops SYNs to this port.
  const filler: Socket = await new Promise((resolve, reject) => {
    const s = connect({ host: "127.0.0.1", port: bound });
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
  return {
    port: bound,
    url: `http://127.0.0.1:${bound}`,
    close() {
      filler.destroy();
      c.close(fd);
    },
  };
}
