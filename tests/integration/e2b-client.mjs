// E2B's stock SDK (@e2b/code-interpreter, unchanged) against kernelsup-http: each step's outcome as one JSON line
// on stdout, for test-http-e2b.py. argv: NODE_MODULES URL TOKEN STEP... (a step is a name below).
// The SDK in debug mode makes no request of E2B's cloud and sends no token itself (doc/e2b-protocol.md, sections
// 1 and 2): the app sets trafficAccessToken, which the SDK sends as E2B-Traffic-Access-Token on every call.
import { createRequire } from 'node:module'

const [modules, url, token, ...steps] = process.argv.slice(2)
const require = createRequire(modules + '/')
const { Sandbox } = require('@e2b/code-interpreter')

const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const plain = (e) => ({
  name: e.name, value: e.value, traceback: e.traceback,
})
const execution = (x) => ({
  stdout: x.logs.stdout, stderr: x.logs.stderr, text: x.text, executionCount: x.executionCount,
  error: x.error ? plain(x.error) : null,
  results: x.results.map((r) => ({ text: r.text, png: r.png ? r.png.length : 0, formats: r.formats(), isMainResult: r.isMainResult })),
})
const caught = (e) => ({ thrown: e.constructor.name, message: String(e.message).slice(0, 400) })

const sbx = await Sandbox.create({ debug: true, sandboxUrl: url })
if (token !== '-') sbx.trafficAccessToken = token

const run = {
  async hello () {
    const seen = []
    const x = await sbx.runCode('print("hello")\nx = 41\nx + 1', { onStdout: (m) => seen.push(m.line) })
    return { ...execution(x), callbacks: seen }
  },
  async quoted () { return execution(await sbx.runCode("'abc'")) },
  async error () { return execution(await sbx.runCode('def f():\n    1/0\nf()')) },
  async unicode () { return execution(await sbx.runCode('print("h\\u00e9 \\u20ac \\U0001F600 " * 100000)')) },
  async plot () {
    return execution(await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()'))
  },
  async quiet () { return execution(await sbx.runCode('import time\ntime.sleep(6)\nprint("after")')) },
  async timeout () {
    try {
      return execution(await sbx.runCode('import time\ntime.sleep(4)\nkept_on = 1', { timeoutMs: 1000 }))
    } catch (e) { return caught(e) }
  },
  async after () { return execution(await sbx.runCode("'kept_on' in dir()")) },
  async language () { return execution(await sbx.runCode('1 + 1', { language: 'python' })) },
  async contexts () {
    const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
    const a = execution(await sbx.runCode('import os\ny = 7\nos.getcwd()', { context: ctx }))
    const listed = await sbx.listCodeContexts()
    await sbx.restartCodeContext(ctx)
    const b = execution(await sbx.runCode("'y' in dir()", { context: ctx }))
    await sbx.removeCodeContext(ctx.id)
    const after = await sbx.listCodeContexts()
    let gone
    try {
      await sbx.runCode('1', { context: ctx })
      gone = { thrown: null }
    } catch (e) { gone = caught(e) }
    return { ctx, a, listed: listed.map((c) => c.id), b, after: after.map((c) => c.id), gone }
  },
  async missing () {
    try {
      await sbx.runCode('1', { context: { id: 'nosuch', language: 'python', cwd: '/' } })
      return { thrown: null }
    } catch (e) { return caught(e) }
  },
}

for (const step of steps) {
  try {
    say({ step, ok: true, value: await run[step]() })
  } catch (e) {
    say({ step, ok: false, ...caught(e) })
  }
}
// An error answer leaves the SDK's request timer armed (doc/e2b-protocol.md, section 4).
process.exit(0)
