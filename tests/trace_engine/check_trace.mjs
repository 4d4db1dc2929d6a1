// Parses a troupe trace with Chrome DevTools' own trace engine
// (@paulirish/trace_engine) and checks that every actor appears as a thread
// with the expected number of spans.
//   node tests/trace_engine/check_trace.mjs TRACE.json EXPECTED.json
// EXPECTED.json: {"processes": N, "threads": {"actor name": complete-event count, ...}}
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, 'runtime/trace/dashboard/package.json'));
const Trace = await import(pathToFileURL(require.resolve('@paulirish/trace_engine')).href);

// The engine measures layout with DOMRect, which node lacks (as its own analyze-trace.mjs polyfills).
globalThis.DOMRect ??= class DOMRect {
  constructor(x = 0, y = 0, width = 0, height = 0) { Object.assign(this, { x, y, width, height }); }
};

const [tracePath, expectedPath] = process.argv.slice(2);
if (!tracePath || !expectedPath) {
  console.error('usage: check_trace.mjs TRACE.json EXPECTED.json');
  process.exit(2);
}
const file = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
const expected = JSON.parse(fs.readFileSync(expectedPath, 'utf8'));
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(file.traceEvents);
const data = model.parsedTrace().data;

let passed = 0, failed = 0;
const check = (ok, what) => {
  if (ok) passed++; else { failed++; console.error(`FAIL: ${what}`); }
};
const threads = new Map();
for (const [pid, proc] of data.Renderer.processes)
  for (const [tid, th] of proc.threads) threads.set(th.name, { pid, tid, entries: th.entries.length });
check(data.Renderer.processes.size === expected.processes,
  `${expected.processes} processes (one per node), the engine found ${data.Renderer.processes.size}`);
for (const [name, count] of Object.entries(expected.threads)) {
  const t = threads.get(name);
  check(t !== undefined, `actor '${name}' is a thread (threads found: ${[...threads.keys()].join(', ')})`);
  if (t) check(t.entries === count, `actor '${name}' has ${count} spans, the engine found ${t.entries}`);
}
console.log(`trace engine: ${threads.size} threads, ${data.Flows.flows.length} flows bound to spans`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
