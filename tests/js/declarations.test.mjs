// The package's type declarations as shipped (pkg/ as built by
// `cargo xtask pkg`, both targets), read with the TypeScript compiler API
// (typescript 7's `unstable/sync`, the suite's own devDependency): every
// exported item has JSDoc (an editor shows it on hover), and no
// declaration names a wasm export the module lacks (the build renames some).
// No browser, no server: the package layer runs it.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { API } from "typescript/unstable/sync";
import { SyntaxKind } from "typescript/unstable/ast";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "../../pkg");
const targets = ["web", "bundler"];

/** Every `.d.ts` under `dir`. */
function declarationFiles(dir) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".d.ts"))
    .map((e) => join(e.parentPath ?? e.path, e.name))
    .sort();
}

const files = targets.flatMap((t) => declarationFiles(join(pkg, t)));
assert.ok(files.length > 0, `no .d.ts in ${pkg}: run cargo xtask pkg first`);

// The API reads a project: one listing the files, nothing else.
const project = mkdtempSync(join(tmpdir(), "replay-declarations-"));
const config = join(project, "tsconfig.json");
writeFileSync(
  config,
  JSON.stringify({
    compilerOptions: { noEmit: true, skipLibCheck: true, types: [], lib: ["ES2022", "DOM"], module: "ESNext", moduleResolution: "bundler" },
    files,
  }),
);
const api = new API({ cwd: project });
const program = api.updateSnapshot({ openProjects: [config] }).getProject(config).program;
after(() => {
  api.close();
  rmSync(project, { recursive: true, force: true });
});

const has = (node, kind) => node.modifiers?.some((m) => m.kind === kind) ?? false;
const documented = (node) => (node.jsDoc?.length ?? 0) > 0;
const nameOf = (node) => (node.name ? node.name.getText() : node.kind === SyntaxKind.Constructor ? "constructor" : SyntaxKind[node.kind]);

/** `file`'s exported items (and their members) without JSDoc, as `file: name`. */
function undocumented(file) {
  const sf = program.getSourceFile(file);
  const where = relative(pkg, file);
  const out = [];
  const need = (node, name) => documented(node) || out.push(`${where}: ${name}`);
  // `export { a, b }` of local declarations: those count as exported too.
  const listed = new Set();
  for (const st of sf.statements) {
    if (st.kind === SyntaxKind.ExportDeclaration && !st.moduleSpecifier && st.exportClause?.elements) {
      for (const e of st.exportClause.elements) listed.add((e.propertyName ?? e.name).text);
    }
  }
  for (const st of sf.statements) {
    if (st.kind === SyntaxKind.ExportDeclaration) {
      // A re-export is documented where it is declared: a shipped file, checked too.
      const from = st.moduleSpecifier?.text;
      if (from && !files.includes(resolve(dirname(file), from.replace(/\.js$/, ".d.ts")))) {
        out.push(`${where}: re-exports "${from}", which is not a shipped declaration file`);
      }
      continue;
    }
    if (st.kind === SyntaxKind.ExportAssignment) {
      need(st, "export default");
      continue;
    }
    if (st.kind === SyntaxKind.VariableStatement) {
      const names = st.declarationList.declarations.map((d) => d.name.getText());
      if (has(st, SyntaxKind.ExportKeyword) || names.some((n) => listed.has(n))) {
        for (const n of names) need(st, n);
      }
      continue;
    }
    const name = st.name?.text;
    const exported = has(st, SyntaxKind.ExportKeyword) || (name !== undefined && listed.has(name));
    if (!exported || !name) continue;
    const isDefault = has(st, SyntaxKind.DefaultKeyword);
    need(st, isDefault ? `${name} (export default)` : name);
    if (st.kind === SyntaxKind.ClassDeclaration || st.kind === SyntaxKind.InterfaceDeclaration) {
      for (const m of st.members) {
        // Private members are not part of the API (a class with no public constructor).
        if (has(m, SyntaxKind.PrivateKeyword) || m.name?.kind === SyntaxKind.PrivateIdentifier) continue;
        need(m, `${name}.${nameOf(m)}`);
      }
    }
  }
  return out;
}

test("every exported item of the shipped declarations has JSDoc", () => {
  const missing = files.flatMap(undocumented);
  if (missing.length > 0) assert.fail(`exported without JSDoc (${missing.length}):\n  ${missing.join("\n  ")}`);
});

/** The names `file` declares as exports of the wasm: `export const` in the `.wasm.d.ts`, `InitOutput`'s members in the glue's. */
function declaredWasmExports(file, inInitOutput) {
  const sf = program.getSourceFile(file);
  const names = [];
  for (const st of sf.statements) {
    if (!inInitOutput && st.kind === SyntaxKind.VariableStatement) {
      names.push(...st.declarationList.declarations.map((d) => d.name.getText()));
    }
    if (inInitOutput && st.kind === SyntaxKind.InterfaceDeclaration && st.name.text === "InitOutput") {
      names.push(...st.members.map((m) => m.name.getText()));
    }
  }
  return names;
}

test("no declaration names an export the wasm lacks", () => {
  for (const target of targets) {
    const dir = join(pkg, target);
    const wasm = new WebAssembly.Module(readFileSync(join(dir, "replay_client_bg.wasm")));
    const exports = new Set(WebAssembly.Module.exports(wasm).map((e) => e.name));
    const declared = [
      ...declaredWasmExports(join(dir, "replay_client_bg.wasm.d.ts"), false).map((n) => ["replay_client_bg.wasm.d.ts", n]),
      // Only the web target's glue has `init()`, and its `InitOutput`.
      ...declaredWasmExports(join(dir, "replay_client.d.ts"), true).map((n) => ["replay_client.d.ts InitOutput", n]),
    ];
    assert.ok(declared.length > 0, `${target}: no declared wasm exports found`);
    const absent = declared.filter(([, n]) => !exports.has(n)).map(([f, n]) => `${target}/${f}: ${n}`);
    if (absent.length > 0) assert.fail(`declared, but not exports of ${target}/replay_client_bg.wasm:\n  ${absent.join("\n  ")}`);
  }
});
