//! Short import names for the `web` target. wasm-bindgen imports every JS
//! function as `__wbg_<name>_<hash>` from module `./replay_client_bg.js`,
//! and its glue repeats each name as a property key: ~4 KB of names in the
//! wasm and ~3.5 KB in the glue. Both are renamed together to `a`, `b`, …
//! (module `a`), and so are the exported closure adapters, named after
//! their whole signatures: 2.3 KB gzipped less (docs/size.md). A name missed on
//! either side fails instantiation with a `LinkError`, and every browser test
//! of the package loads this output.
//!
//! The `bundler` target keeps its names: there the module is a real file that
//! bundlers resolve, and its functions are that file's exports.

use crate::cmd::Result;
use std::fs;
use std::path::Path;

/// The import module wasm-bindgen's `web` glue provides.
const GLUE_MODULE: &str = "./replay_client_bg.js";

/// How the exported closure adapters' names start.
const CLOSURE_ADAPTER: &str = "wasm_bindgen_";

/// Renames the glue module's imports in `out/replay_client_bg.wasm` and
/// their keys in the (minified) `out/replay_client.js`.
pub fn shorten_imports(out: &Path) -> Result {
    let wasm_path = out.join("replay_client_bg.wasm");
    let js_path = out.join("replay_client.js");
    let wasm = fs::read(&wasm_path).map_err(|e| format!("{}: {e}", wasm_path.display()))?;
    let mut js = fs::read_to_string(&js_path).map_err(|e| format!("{}: {e}", js_path.display()))?;
    let (wasm, imports, exports) = rename_imports(&wasm)?;
    for (old, new) in &imports {
        js = replace_key(&js, old, new)?;
    }
    for (old, new) in &exports {
        js = replace_member(&js, old, new)?;
    }
    js = replace_key(&js, &format!("\"{GLUE_MODULE}\""), "a")?;
    fs::write(&wasm_path, wasm).map_err(|e| format!("{}: {e}", wasm_path.display()))?;
    fs::write(&js_path, js).map_err(|e| format!("{}: {e}", js_path.display()))?;
    // The declarations of the module's exports (`InitOutput`, and the
    // `.wasm`'s own declaration file) name the renamed adapters too: a
    // declaration of an export the wasm lacks misleads a reader of the types.
    for dts in ["replay_client.d.ts", "replay_client_bg.wasm.d.ts"] {
        let path = out.join(dts);
        let Ok(mut text) = fs::read_to_string(&path) else {
            continue;
        };
        for (old, new) in &exports {
            text = text.replace(old.as_str(), new);
        }
        if text.contains(CLOSURE_ADAPTER) {
            return Err(format!(
                "{dts} still declares a `{CLOSURE_ADAPTER}…` export the wasm no longer has"
            ));
        }
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `key:` as an object key (not preceded by a name character) must occur
/// exactly once in `js`; it becomes `new:`.
fn replace_key(js: &str, key: &str, new: &str) -> Result<String> {
    let fits = |i: usize| !js[..i].ends_with(is_name);
    replace_once(js, &format!("{key}:"), &format!("{new}:"), fits)
}

/// `.name` (a member access, not followed by a name character) must occur
/// exactly once in `js`; it becomes `.new`.
fn replace_member(js: &str, name: &str, new: &str) -> Result<String> {
    let pattern = format!(".{name}");
    let fits = |i: usize| !js[i + pattern.len()..].starts_with(is_name);
    replace_once(js, &pattern, &format!(".{new}"), fits)
}

/// Replaces the one occurrence of `pattern` at an index that `fits`.
fn replace_once(
    js: &str,
    pattern: &str,
    with: &str,
    fits: impl Fn(usize) -> bool,
) -> Result<String> {
    let hits: Vec<usize> = js
        .match_indices(pattern)
        .map(|(i, _)| i)
        .filter(|&i| fits(i))
        .collect();
    let [at] = hits[..] else {
        return Err(format!(
            "glue: expected {pattern} once, found {}",
            hits.len()
        ));
    };
    Ok(format!("{}{with}{}", &js[..at], &js[at + pattern.len()..]))
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// `a`, `b`, …, `Z`, `ba`, …: the `n`th short name.
fn short_name(mut n: usize) -> String {
    const LETTERS: &[u8; 52] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut name = Vec::new();
    loop {
        name.push(LETTERS[n % 52]);
        n /= 52;
        if n == 0 {
            break;
        }
    }
    name.reverse();
    String::from_utf8(name).expect("ASCII")
}

/// `(old, new)` import names.
type Renames = Vec<(String, String)>;

/// The module with the glue's function imports and the closure adapters'
/// exports renamed, and both lists of renames.
fn rename_imports(wasm: &[u8]) -> Result<(Vec<u8>, Renames, Renames)> {
    if wasm.get(..8) != Some(b"\0asm\x01\0\0\0".as_slice()) {
        return Err("not a wasm module (version 1)".into());
    }
    let mut out = wasm[..8].to_vec();
    let mut renamed = Vec::new();
    let mut exports = Vec::new();
    let mut r = Bytes { b: wasm, at: 8 };
    while r.at < wasm.len() {
        let id = r.byte()?;
        let len = r.leb()? as usize;
        let mut body = r.take(len)?.to_vec();
        if id == 2 {
            body = rename_in_import_section(&body, &mut renamed)?;
        } else if id == 7 {
            body = rename_in_export_section(&body, &mut exports)?;
        }
        out.push(id);
        write_leb(&mut out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    Ok((out, renamed, exports))
}

fn rename_in_import_section(body: &[u8], renamed: &mut Renames) -> Result<Vec<u8>> {
    rewrite_entries(body, |r, out| {
        let module = r.name()?;
        let field = r.name()?;
        let desc_start = r.at;
        if r.byte()? != 0 {
            return Err(format!("import {module}.{field}: only functions expected"));
        }
        r.leb()?; // type index
        if module == GLUE_MODULE {
            let short = short_name(renamed.len());
            write_name(out, "a");
            write_name(out, &short);
            renamed.push((field.to_owned(), short));
        } else {
            write_name(out, module);
            write_name(out, field);
        }
        out.extend_from_slice(&body[desc_start..r.at]);
        Ok(())
    })
}

/// wasm-bindgen exports one adapter per closure signature, named after the
/// whole signature (up to ~330 characters); the glue calls each once.
fn rename_in_export_section(body: &[u8], renamed: &mut Renames) -> Result<Vec<u8>> {
    rewrite_entries(body, |r, out| {
        let name = r.name()?;
        let desc_start = r.at;
        r.byte()?; // kind
        r.leb()?; // index
        if name.starts_with(CLOSURE_ADAPTER) {
            // Exports share no namespace with imports; `z` keeps them apart
            // from the glue's own short names anyway.
            let short = format!("z{}", short_name(renamed.len()));
            write_name(out, &short);
            renamed.push((name.to_owned(), short));
        } else {
            write_name(out, name);
        }
        out.extend_from_slice(&body[desc_start..r.at]);
        Ok(())
    })
}

/// A section that is a vector of entries, rewritten by `entry` one by one.
fn rewrite_entries<'a>(
    body: &'a [u8],
    mut entry: impl FnMut(&mut Bytes<'a>, &mut Vec<u8>) -> Result,
) -> Result<Vec<u8>> {
    let mut r = Bytes { b: body, at: 0 };
    let count = r.leb()?;
    let mut out = Vec::new();
    write_leb(&mut out, count);
    for _ in 0..count {
        entry(&mut r, &mut out)?;
    }
    Ok(out)
}

pub(crate) fn write_name(out: &mut Vec<u8>, name: &str) {
    write_leb(out, name.len() as u64);
    out.extend_from_slice(name.as_bytes());
}

pub(crate) fn write_leb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A reader of the module's bytes.
pub(crate) struct Bytes<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Bytes<'a> {
    pub(crate) fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or("truncated wasm module")?;
        self.at += n;
        Ok(s)
    }

    pub(crate) fn leb(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("bad LEB128 in wasm module".into())
    }

    pub(crate) fn name(&mut self) -> Result<&'a str> {
        let len = self.leb()? as usize;
        std::str::from_utf8(self.take(len)?).map_err(|_| "import name is not UTF-8".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_unique_identifiers() {
        let names: Vec<String> = (0..3000).map(short_name).collect();
        assert_eq!(&names[..3], ["a", "b", "c"]);
        assert_eq!(names[52], "ba");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn a_key_is_replaced_once_and_only_as_a_key() {
        let js = r#"{x__wbg_f_1:1,__wbg_f_1:function(){},"./m.js":{}}"#;
        let js = replace_key(js, "__wbg_f_1", "a").unwrap();
        assert_eq!(js, r#"{x__wbg_f_1:1,a:function(){},"./m.js":{}}"#);
        assert!(replace_key(&js, "__wbg_missing", "b").is_err());
        let js = "c.wasm_bindgen_f(1);c.wasm_bindgen_fx(2)";
        let js = replace_member(js, "wasm_bindgen_f", "za").unwrap();
        assert_eq!(js, "c.za(1);c.wasm_bindgen_fx(2)");
    }

    #[test]
    fn imports_of_the_glue_module_are_renamed() {
        // (module (import "./replay_client_bg.js" "__wbg_x_1" (func))
        //         (import "env" "keep" (func)))
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.extend_from_slice(&[1, 4, 1, 0x60, 0, 0]); // type section: () -> ()
        let mut imports = vec![2];
        for (m, f) in [(GLUE_MODULE, "__wbg_x_1"), ("env", "keep")] {
            for s in [m, f] {
                imports.push(s.len() as u8);
                imports.extend_from_slice(s.as_bytes());
            }
            imports.extend_from_slice(&[0, 0]);
        }
        wasm.push(2);
        wasm.push(imports.len() as u8);
        wasm.extend_from_slice(&imports);
        let (out, renamed, exports) = rename_imports(&wasm).unwrap();
        assert!(exports.is_empty());
        assert_eq!(renamed, [("__wbg_x_1".to_owned(), "a".to_owned())]);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("\u{1}a\u{1}a") && text.contains("env\u{4}keep"));
        assert!(!text.contains("__wbg"));
    }
}
