//! The modules of this crate import each other without circles (issue 11, "one array core, no
//! circles"): `format`, `meta`, `io` (and the leaves `extent_set`, `crc`) at the bottom, `core` on them, the schemes, `recovery` and
//! `status` on the core, the `Array` facade and `admin` on top.
//!
//! The check reads every file under `src/`, takes each path that names a module of the crate
//! (`crate::…`, `super::…`, `self::…`, or a child module declared with `mod`), in `use` items and in
//! code alike, and requires the graph of file-level modules to be acyclic. The crate root
//! (`lib.rs`) is left out: it declares and re-exports everything, and a path such as
//! `crate::ArrayError` names an item of the root, not a module. A module's own `mod` declarations
//! are not imports, and `#[cfg(test)]` modules are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Rust source reduced to tokens: identifiers and punctuation, without comments, strings and char
/// literals.
fn tokens(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) && {
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            b.get(j) == Some(&b'"')
        } {
            // Raw string: r#*"…"#*
            let mut j = i + 1;
            let mut hashes = 0;
            while b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(src[s..i].to_string());
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push("::".into());
            i += 2;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii() {
            out.push((c as char).to_string());
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Drop `#[cfg(test)] mod name { … }` blocks.
fn strip_test_modules(t: Vec<String>) -> Vec<String> {
    let pat = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let is_attr = t.len() >= i + pat.len() && pat.iter().zip(&t[i..]).all(|(p, x)| p == x);
        if is_attr {
            let mut j = i + pat.len();
            if t.get(j).map(String::as_str) == Some("pub") {
                j += 1;
            }
            if t.get(j).map(String::as_str) == Some("mod")
                && t.get(j + 2).map(String::as_str) == Some("{")
            {
                let mut depth = 0;
                let mut k = j + 2;
                while k < t.len() {
                    match t[k].as_str() {
                        "{" => depth += 1,
                        "}" => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
                i = k + 1;
                continue;
            }
        }
        out.push(t[i].clone());
        i += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Parse a path at `t[i]` (an identifier), expanding `{…}` groups; returns the full paths and the
/// index after the path.
fn parse_path(t: &[String], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix;
    loop {
        if i < t.len() && is_ident(&t[i]) {
            path.push(t[i].clone());
            i += 1;
        } else if i < t.len() && t[i] == "{" {
            let mut all = Vec::new();
            i += 1;
            while i < t.len() && t[i] != "}" {
                if t[i] == "," {
                    i += 1;
                    continue;
                }
                if is_ident(&t[i]) || t[i] == "{" {
                    let (sub, j) = parse_path(t, i, path.clone());
                    all.extend(sub);
                    i = j;
                } else {
                    i += 1;
                }
            }
            return (all, i + 1);
        } else {
            return (vec![path], i);
        }
        if i < t.len() && t[i] == "::" {
            i += 1;
        } else {
            return (vec![path], i);
        }
    }
}

/// The module path of a file under `src/` (`core/mod.rs` → `core`, `scheme/md.rs` → `scheme::md`,
/// `lib.rs` → the root, empty).
fn module_of(rel: &str) -> Vec<String> {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
    if matches!(parts.last().map(String::as_str), Some("mod") | Some("lib")) {
        parts.pop();
    }
    parts
}

/// Edges between file-level modules: (from, to) as `a::b` strings.
fn module_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, src) in files {
        let me = module_of(rel);
        if me.is_empty() {
            continue;
        }
        let t = strip_test_modules(tokens(src));
        // Children declared with `mod x;` (so `x::…` names a module of ours).
        let children: BTreeSet<String> = t
            .windows(3)
            .filter(|w| w[0] == "mod" && w[2] == ";")
            .map(|w| w[1].clone())
            .collect();
        let mut i = 0;
        while i < t.len() {
            let starts = is_ident(&t[i])
                && (i == 0 || t[i - 1] != "::")
                && t.get(i + 1).map(String::as_str) == Some("::")
                && (matches!(t[i].as_str(), "crate" | "super" | "self")
                    || children.contains(&t[i]));
            if !starts {
                i += 1;
                continue;
            }
            let (paths, j) = parse_path(&t, i, Vec::new());
            i = j.max(i + 1);
            for p in paths {
                // Resolve to an absolute path from the crate root.
                let mut abs: Vec<String> = Vec::new();
                let mut rest = p.as_slice();
                match rest.first().map(String::as_str) {
                    Some("crate") => rest = &rest[1..],
                    Some("self") => {
                        abs = me.clone();
                        rest = &rest[1..];
                    }
                    Some("super") => {
                        abs = me.clone();
                        while rest.first().map(String::as_str) == Some("super") {
                            abs.pop();
                            rest = &rest[1..];
                        }
                    }
                    _ => abs = me.clone(),
                }
                abs.extend(rest.iter().cloned());
                // The longest prefix that is a file-level module.
                let target = (1..=abs.len())
                    .rev()
                    .map(|n| abs[..n].to_vec())
                    .find(|m| modules.contains(m));
                if let Some(target) = target {
                    if target != me {
                        graph
                            .entry(me.join("::"))
                            .or_default()
                            .insert(target.join("::"));
                    }
                }
            }
        }
        graph.entry(me.join("::")).or_default();
    }
    graph
}

/// A circle of the graph, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).expect("on stack");
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn read_src(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_src(&p, base, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p
                .strip_prefix(base)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&p).expect("read source")));
        }
    }
}

#[test]
fn crate_modules_import_each_other_without_circles() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_src(&base, &base, &mut files);
    let g = module_graph(&files);
    if let Some(c) = find_cycle(&g) {
        panic!(
            "import circle among crates/array modules: {}",
            c.join(" -> ")
        );
    }
    // The layering the issue asks for, so a regression names the edge that broke it.
    let deps = |m: &str| g.get(m).cloned().unwrap_or_default();
    // The lowest layer: the on-disk format, the metadata, device I/O and their containers.
    let low = ["extent_set", "crc", "format", "meta", "io"];
    assert!(deps("extent_set").is_empty(), "extent_set is a leaf");
    assert!(
        deps("crc").is_empty(),
        "crc (per-chunk checksums) is a leaf"
    );
    for l in low {
        for m in deps(l) {
            assert!(low.contains(&m.as_str()), "{l} must not depend on {m}");
        }
    }
    for m in deps("core").into_iter().chain(
        g.keys()
            .filter(|k| k.starts_with("core::"))
            .flat_map(|k| deps(k)),
    ) {
        assert!(
            m == "core" || m.starts_with("core::") || low.contains(&m.as_str()),
            "core must depend only on extent_set, crc, format, meta and io, not on {m}"
        );
    }
    for (m, ds) in &g {
        // `tween` (TWEEN's log layer) sits on top of the facade, like `admin`.
        if m != "array"
            && m != "admin"
            && m != "status"
            && m != "tween"
            && !m.starts_with("tween::")
        {
            assert!(
                !ds.contains("array"),
                "{m} must not depend on the array facade"
            );
        }
    }
    // The check saw the modules it is about.
    for m in [
        "array",
        "core",
        "scheme",
        "scheme::eplog",
        "recovery",
        "status",
    ] {
        assert!(g.contains_key(m), "module {m} not found: {:?}", g.keys());
    }
    assert!(deps("scheme::eplog").contains("core"));
}

#[test]
fn the_check_finds_circles_in_grouped_and_inline_paths() {
    let files = |a: &str, b: &str| {
        vec![
            ("lib.rs".to_string(), "mod a; mod b;".to_string()),
            ("a.rs".to_string(), a.to_string()),
            ("b/mod.rs".to_string(), b.to_string()),
            ("b/c.rs".to_string(), "use super::X;".to_string()),
        ]
    };
    // Grouped `use` on one side, an inline path on the other.
    let g = module_graph(&files(
        "use crate::{format::Y, b::{X, Z}};",
        "mod c; fn f() { let _ = crate::a::g(); }",
    ));
    assert_eq!(find_cycle(&g).map(|c| c.len()), Some(3), "{g:?}");
    // `super` from a child, a child named through its `mod` declaration.
    let g = module_graph(&files("", "mod c; pub use c::W;"));
    let c = find_cycle(&g).expect("b -> b::c -> b");
    assert!(c.contains(&"b::c".to_string()), "{c:?}");
    // Comments, strings, test modules and root items are not edges.
    let g = module_graph(&files(
        "// crate::b::X\nfn f() -> crate::Result<()> { let _ = \"crate::b::X\"; Ok(()) }",
        "mod c; use crate::a::F;\n#[cfg(test)]\nmod tests { use crate::b::c::Q; }",
    ));
    assert_eq!(find_cycle(&g), None, "{g:?}");
    assert!(g["b"].contains("a") && !g["a"].contains("b"), "{g:?}");
}

/// "No import circle inside any crate" (issue 11) holds for every crate of the workspace, not only
/// this one: the same check over each `crates/*/src`.
#[test]
fn every_workspace_crate_is_free_of_import_circles() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("read crates/") {
        let src = entry.expect("crates/ entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        read_src(&src, &src, &mut files);
        let g = module_graph(&files);
        let name = src
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        if let Some(c) = find_cycle(&g) {
            panic!(
                "import circle among crates/{name} modules: {}",
                c.join(" -> ")
            );
        }
        seen.push(name);
    }
    for name in ["array", "codes", "device", "trace", "nbd", "lab", "cli"] {
        assert!(
            seen.iter().any(|s| s == name),
            "crate {name} not checked: {seen:?}"
        );
    }
}
