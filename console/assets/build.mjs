// `make console-assets`: the console's editor as ONE minified file,
// skillfs/console/static/editor.js, with the notices of what it bundles beside it
// (editor.js.THIRD-PARTY.txt). Its first line records the SHA-256 of package-lock.json and of
// editor.js (this folder's), which tests/console/test_console_assets.py recomputes: a bundle
// that does not match its lock fails there, without node or the network.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "..", "skillfs", "console", "static");
const digest = (name) => createHash("sha256").update(readFileSync(join(here, name))).digest("hex");

const result = await build({
  entryPoints: [join(here, "editor.js")],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2020",
  legalComments: "none",
  metafile: true,
  write: false,
  banner: {
    js: `/* skillfs console editor: CodeMirror 6, built by \`make console-assets\` from console/assets. ` +
      `package-lock.json sha256:${digest("package-lock.json")} editor.js sha256:${digest("editor.js")} ` +
      `Licences: editor.js.THIRD-PARTY.txt */`,
  },
});
writeFileSync(join(out, "editor.js"), result.outputFiles[0].text);

// Every npm package the bundle holds code of (bytes in the output), with its licence text.
const packages = new Map();
const [output] = Object.values(result.metafile.outputs);
for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
  const m = bytesInOutput > 0 && input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//);
  if (m) packages.set(m[1], join(here, "node_modules", m[1]));
}
let notices = "Third-party software bundled in editor.js (skillfs console editor), with its licences.\n";
for (const [name, dir] of [...packages].sort()) {
  const meta = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const file = ["LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE"].map((f) => join(dir, f)).find(existsSync);
  if (!file) throw new Error(`${name}: no licence file to ship`);
  notices += `\n${"=".repeat(78)}\n${name} ${meta.version} (${meta.license})\n${"=".repeat(78)}\n\n`;
  notices += readFileSync(file, "utf8").trim() + "\n";
}
writeFileSync(join(out, "editor.js.THIRD-PARTY.txt"), notices);
console.log(`editor.js: ${result.outputFiles[0].contents.length} bytes, ${packages.size} packages`);
