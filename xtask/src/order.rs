//! The order of the wasm's functions, for gzip. wasm-opt's last pass
//! (`--reorder-functions-by-name`, `pkg.rs`) sorts the functions by their
//! names in the name section; before wasm-opt runs, each name is replaced
//! by a sort key that puts like code side by side, so gzip (a 32 KB
//! window) finds its repeats: every impl of one trait method together
//! (`FromJson::read` of every type, `Serialize::serialize`, the slot
//! fillers), then the rest by path, with crate hashes left out. Against
//! plain names: −1.1 KB gz (docs/size.md). Only the order changes, never
//! the code; the shipped module keeps no names (wasm-opt drops them).

use crate::cmd::Result;
use crate::names::{write_leb, write_name, Bytes};

/// `wasm` with each function's name replaced by its [`sort_key`].
pub fn sort_names(wasm: &[u8]) -> Result<Vec<u8>> {
    if wasm.get(..8) != Some(b"\0asm\x01\0\0\0".as_slice()) {
        return Err("not a wasm module (version 1)".into());
    }
    let mut out = wasm[..8].to_vec();
    let mut r = Bytes { b: wasm, at: 8 };
    let mut named = false;
    while r.at < wasm.len() {
        let id = r.byte()?;
        let len = r.leb()? as usize;
        let mut body = r.take(len)?.to_vec();
        if id == 0 && custom_name(&body)? == "name" {
            body = sort_name_section(&body)?;
            named = true;
        }
        out.push(id);
        write_leb(&mut out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    if !named {
        return Err("the wasm has no name section to order its functions by".into());
    }
    Ok(out)
}

fn custom_name(body: &[u8]) -> Result<String> {
    let mut r = Bytes { b: body, at: 0 };
    let len = r.leb()? as usize;
    Ok(String::from_utf8_lossy(r.take(len)?).into_owned())
}

/// The name section with its function names (subsection 1) as sort keys;
/// the other subsections as they were.
fn sort_name_section(body: &[u8]) -> Result<Vec<u8>> {
    let mut r = Bytes { b: body, at: 0 };
    let len = r.leb()? as usize;
    r.take(len)?;
    let mut out = body[..r.at].to_vec();
    while r.at < body.len() {
        let id = r.byte()?;
        let len = r.leb()? as usize;
        let sub = r.take(len)?;
        let sub = if id == 1 {
            sort_function_names(sub)?
        } else {
            sub.to_vec()
        };
        out.push(id);
        write_leb(&mut out, sub.len() as u64);
        out.extend_from_slice(&sub);
    }
    Ok(out)
}

fn sort_function_names(sub: &[u8]) -> Result<Vec<u8>> {
    let mut r = Bytes { b: sub, at: 0 };
    let count = r.leb()?;
    let mut out = Vec::new();
    write_leb(&mut out, count);
    for _ in 0..count {
        let index = r.leb()?;
        let len = r.leb()? as usize;
        let name = String::from_utf8_lossy(r.take(len)?);
        write_leb(&mut out, index);
        // The index keeps keys unique and ties in the module's order.
        write_name(&mut out, &format!("{} {index:06}", sort_key(&name)));
    }
    Ok(out)
}

/// The key a function is sorted by: a trait method's impl
/// (`<Type as Trait>::method`) as `Trait::method Type`, anything else as
/// its path without leading `<`, `&` and `mut `; crate hashes (`[0123abcd]`)
/// left out, so the order is the same wherever the crate is built.
pub fn sort_key(name: &str) -> String {
    let name = without_crate_hashes(name);
    if let Some(inner) = name.strip_prefix('<') {
        if let Some(end) = inner.rfind(">::") {
            if let Some(as_at) = inner[..end].rfind(" as ") {
                let (ty, tr, method) = (&inner[..as_at], &inner[as_at + 4..end], &inner[end + 3..]);
                return format!("{tr}::{method} {ty}");
            }
        }
    }
    if name.starts_with(['<', '&']) {
        let rest = name.trim_start_matches(['<', '&']);
        return rest.strip_prefix("mut ").unwrap_or(rest).to_owned();
    }
    name
}

fn without_crate_hashes(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let hex = after
            .find(|c: char| !matches!(c, '0'..='9' | 'a'..='f'))
            .unwrap_or(after.len());
        if hex > 0 && after[hex..].starts_with(']') {
            out.push_str(&rest[..open]);
            rest = &after[hex + 1..];
        } else {
            out.push_str(&rest[..=open]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trait_impls_sort_by_trait_method_then_type() {
        assert_eq!(
            sort_key("<replay_core[41cf0fea730bd0ed]::fold::View as replay_core[41cf0fea730bd0ed]::json::FromJson>::read"),
            "replay_core::json::FromJson::read replay_core::fold::View"
        );
        assert_eq!(
            sort_key("<alloc[a5]::vec::Vec<u8> as core[15]::clone::Clone>::clone::{closure#0}"),
            "core::clone::Clone::clone::{closure#0} alloc::vec::Vec<u8>"
        );
    }

    #[test]
    fn other_names_sort_by_path_without_hashes() {
        assert_eq!(
            sort_key("<replay_core[41cf]::machine::Machine>::begin"),
            "replay_core::machine::Machine>::begin"
        );
        assert_eq!(sort_key("&mut talc[b5]::x[g]"), "talc::x[g]");
        assert_eq!(sort_key("memcpy"), "memcpy");
        assert_eq!(sort_key("a[xyz]b"), "a[xyz]b");
    }

    #[test]
    fn names_are_replaced_in_the_name_section_only() {
        // A module with one custom "name" section: function 3 named "<a as b>::c".
        let mut names = Vec::new();
        write_leb(&mut names, 1);
        write_leb(&mut names, 3);
        write_name(&mut names, "<a as b>::c");
        let mut section = Vec::new();
        write_name(&mut section, "name");
        section.push(1);
        write_leb(&mut section, names.len() as u64);
        section.extend_from_slice(&names);
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.push(0);
        write_leb(&mut wasm, section.len() as u64);
        wasm.extend_from_slice(&section);
        let out = sort_names(&wasm).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("b::c a 000003"), "{text}");
        assert!(sort_names(b"\0asm\x01\0\0\0").is_err());
    }
}
