// wasi.js: runs build/plan's WebAssembly module (make web) as a command line
// would: arguments in, standard output and error out, an exit status. It gives
// the module the few WASI calls a C program's start, printf and exit make; the
// planner opens no file, so every call on a path answers "no such file".
"use strict";

const WASI_ESUCCESS = 0, WASI_EBADF = 8, WASI_ENOENT = 44;

class WasiExit {
  constructor(code) { this.code = code; }
}

// Runs `module` (a compiled WebAssembly.Module) with argv ["plan", ...args].
// Returns {code, stdout, stderr}; a refusal is code 1 and its message, never an
// exception.
function runWasi(module, args) {
  const argv = ["plan", ...args].map((a) => new TextEncoder().encode(a + "\0"));
  const out = { 1: [], 2: [] };
  let memory = null;
  const view = () => new DataView(memory.buffer);
  const bytes = () => new Uint8Array(memory.buffer);
  const imports = {
    args_sizes_get(countAt, sizeAt) {
      view().setUint32(countAt, argv.length, true);
      view().setUint32(sizeAt, argv.reduce((n, a) => n + a.length, 0), true);
      return WASI_ESUCCESS;
    },
    args_get(pointersAt, bufferAt) {
      let at = bufferAt;
      argv.forEach((a, i) => {
        view().setUint32(pointersAt + 4 * i, at, true);
        bytes().set(a, at);
        at += a.length;
      });
      return WASI_ESUCCESS;
    },
    fd_write(fd, iovsAt, iovsCount, writtenAt) {
      if (!(fd in out)) return WASI_EBADF;
      let written = 0;
      for (let i = 0; i < iovsCount; i++) {
        const base = view().getUint32(iovsAt + 8 * i, true), length = view().getUint32(iovsAt + 8 * i + 4, true);
        out[fd].push(bytes().slice(base, base + length));
        written += length;
      }
      view().setUint32(writtenAt, written, true);
      return WASI_ESUCCESS;
    },
    fd_fdstat_get(fd, statAt) {  // 0..2 are files with every right (not terminals: C buffers their output whole)
      if (fd > 2) return WASI_EBADF;
      bytes().fill(0, statAt, statAt + 24);
      view().setUint8(statAt, 4);
      view().setBigUint64(statAt + 8, 0xFFFFFFFFFFFFFFFFn, true);
      view().setBigUint64(statAt + 16, 0xFFFFFFFFFFFFFFFFn, true);
      return WASI_ESUCCESS;
    },
    fd_fdstat_set_flags: () => WASI_ESUCCESS,
    fd_read(fd, iovsAt, iovsCount, readAt) {  // standard input is empty
      view().setUint32(readAt, 0, true);
      return fd === 0 ? WASI_ESUCCESS : WASI_EBADF;
    },
    fd_close: () => WASI_EBADF,
    fd_seek: () => WASI_EBADF,
    fd_filestat_get: () => WASI_EBADF,
    fd_prestat_get: () => WASI_EBADF,  // no directory is given: the program sees no files
    fd_prestat_dir_name: () => WASI_EBADF,
    path_open: () => WASI_ENOENT,
    path_filestat_get: () => WASI_ENOENT,
    path_unlink_file: () => WASI_ENOENT,
    clock_time_get(id, precision, timeAt) {
      view().setBigUint64(timeAt, BigInt(Math.round(performance.now() * 1e6)), true);
      return WASI_ESUCCESS;
    },
    proc_exit(code) { throw new WasiExit(code); },
  };
  const instance = new WebAssembly.Instance(module, { wasi_snapshot_preview1: imports });
  memory = instance.exports.memory;
  let code = 0;
  try {
    instance.exports._start();
  } catch (e) {
    if (!(e instanceof WasiExit)) throw e;
    code = e.code;
  }
  const text = (chunks) => {  // one copy of every chunk: joining them pairwise would copy the output again and again
    const joined = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) { joined.set(c, at); at += c.length; }
    return new TextDecoder().decode(joined);
  };
  return { code, stdout: text(out[1]), stderr: text(out[2]) };
}

// The planner's module, compiled once from plan_wasm.js's base64.
function planModule() {
  const binary = Uint8Array.from(atob(PLAN_WASM_BASE64), (c) => c.charCodeAt(0));
  return new WebAssembly.Module(binary);
}
