// tfbench's driver for WebAssembly modules in Node.js (V8): one module per
// process, driven over stdin/stdout with one JSON request and one JSON reply
// per line (src/backend/wasm/node.rs is the other end). Bulk data crosses in
// files, so a tensor is never turned into JSON. Every failure, a trap
// included, is a reply {"error": message}: the process goes on.
'use strict';
const fs = require('fs');
const readline = require('readline');

let compiled = null;
let instance = null;
let memory = null;

const now = () => process.hrtime.bigint();
const since = (t0) => Number(now() - t0);

function exported(name) {
  const f = instance && instance.exports[name];
  if (typeof f !== 'function') throw new Error(`the module exports no function \`${name}\``);
  return f;
}

function handle(req) {
  switch (req.op) {
    case 'load': {
      const bytes = fs.readFileSync(req.path);
      let t0 = now();
      compiled = new WebAssembly.Module(bytes);
      const compile_ns = since(t0);
      t0 = now();
      instance = new WebAssembly.Instance(compiled, {});
      const instantiate_ns = since(t0);
      memory = instance.exports.memory;
      if (!(memory instanceof WebAssembly.Memory)) throw new Error('the module exports no memory named `memory`');
      return { compile_ns, instantiate_ns };
    }
    case 'reset':
      instance = new WebAssembly.Instance(compiled, {});
      memory = instance.exports.memory;
      return {};
    case 'size':
      return { bytes: memory.buffer.byteLength };
    case 'ensure': {
      const have = memory.buffer.byteLength;
      if (req.bytes > have) memory.grow(Math.ceil((req.bytes - have) / 65536));
      return { bytes: memory.buffer.byteLength };
    }
    case 'write': {
      const data = fs.readFileSync(req.path);
      new Uint8Array(memory.buffer, req.offset, data.length).set(data);
      return {};
    }
    case 'read':
      fs.writeFileSync(req.path, new Uint8Array(memory.buffer, req.offset, req.len));
      return {};
    case 'call': {
      const f = exported(req.fn);
      let result;
      const t0 = now();
      for (let i = 0; i < req.iters; i++) result = f(...req.args);
      return { result: result === undefined ? null : result, exec_ns: since(t0) };
    }
    case 'copy': {
      // A tensor held by JavaScript crossing into or out of linear memory,
      // as a web page hands one to a module: TypedArray.set.
      const data = new Uint8Array(fs.readFileSync(req.path));
      const view = new Uint8Array(memory.buffer, req.offset, data.length);
      for (let i = 0; i < req.iters; i++) {
        if (req.into) view.set(data); else data.set(view);
      }
      return {};
    }
    default:
      throw new Error(`unknown request \`${req.op}\``);
  }
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let reply;
  try {
    reply = handle(JSON.parse(line));
  } catch (e) {
    reply = { error: `${e && e.name ? e.name + ': ' : ''}${e && e.message ? e.message : e}` };
  }
  process.stdout.write(JSON.stringify(reply) + '\n');
});
