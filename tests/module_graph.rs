//! The module map of `src/lib.rs` holds: imports between modules point one way.
//!
//! The graph's nodes are the top-level modules of `src/` and, inside `engine`, each of its
//! sub-modules (`engine::jobs`, `engine::store`, …; `engine` itself is `engine/mod.rs`). An
//! edge is a `crate::…` path (or a `super::…` one that leaves its node, or `talaria::…` in
//! `main.rs`) in any line of code, tests included. Two rules:
//! - the graph has no cycle;
//! - outside `src/engine/`, only `main.rs` names `engine::` at will; the other front ends
//!   (`exec.rs`, `acp/`, `subagent.rs`) reach the engine through `engine::api` alone, and
//!   nothing else names it at all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Front ends that may reach the engine, but only through its façade.
const FACADE_USERS: &[&str] = &["exec.rs", "acp/", "subagent.rs"];
const FACADE: &str = "api";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names of the modules directly in `dir` (`x.rs` or `x/`).
fn modules_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = if p.is_dir() {
                p.file_name()?.to_str()?.to_string()
            } else if p.extension().is_some_and(|e| e == "rs") {
                p.file_stem()?.to_str()?.to_string()
            } else {
                return None;
            };
            (!matches!(name.as_str(), "lib" | "main" | "mod")).then_some(name)
        })
        .collect()
}

/// The code with comments, string and character literals blanked (newlines kept), so a
/// path in a doc comment or a message is not an import.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !prev_ident && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let start = i + 2 + hashes;
            let end =
                b[start..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |n| start + n);
            blank(&mut out, i, end + close.len());
            i = end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|n| n + 3)
            } else {
                let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + c) == Some(&b'\'')).then_some(c + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, i, i + len);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The code without what only tests compile: every `#[cfg(test)]` item (an inline `mod
/// tests { … }`, a helper fn, a `use`) is blanked. A unit test may use what sits above its
/// module (the scripted model server of `testkit`); the map is of the shipped build.
fn without_tests(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut at = 0;
    while let Some(n) = code[at..].find("#[cfg(test)]") {
        let start = at + n;
        let mut i = start + "#[cfg(test)]".len();
        let mut depth = 0i32;
        while i < b.len() {
            match b[i] {
                b'[' | b'(' => depth += 1,
                b']' | b')' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    let mut braces = 0;
                    while i < b.len() {
                        match b[i] {
                            b'{' => braces += 1,
                            b'}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let end = (i + 1).min(b.len());
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        at = end;
    }
    String::from_utf8(out).unwrap()
}

/// Files that are only a `#[cfg(test)] mod tests;` of their parent.
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs")
}

/// `(start, end, name)` of every inline `mod name { … }` (for what `super::` means inside).
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(n) = code[at..].find("mod ") {
        let start = at + n;
        at = start + 4;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let rest = &code[start + 4..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = start + 4 + name.len() + (rest.len() - name.len() - after.len());
        let mut depth = 0;
        let mut end = b.len();
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((open, end, name));
    }
    found
}

/// The paths of a `use` tree or a plain path starting at `text` (after `crate::`), brace
/// groups expanded: `{a::b, c}` → `[a, b]`, `[c]`.
fn paths_of(text: &str) -> Vec<Vec<String>> {
    fn skip_space(t: &[u8], mut i: usize) -> usize {
        while i < t.len() && t[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }
    fn tree(t: &[u8], i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
        let mut i = skip_space(t, i);
        if t.get(i) == Some(&b'{') {
            i += 1;
            loop {
                while i < t.len() && (t[i].is_ascii_whitespace() || t[i] == b',') {
                    i += 1;
                }
                if i >= t.len() || t[i] == b'}' {
                    return i + 1;
                }
                i = tree(t, i, prefix.clone(), out);
                // `as name`, `*`: up to the next item.
                while i < t.len() && t[i] != b',' && t[i] != b'}' {
                    i += 1;
                }
            }
        }
        let start = i;
        while i < t.len() && (t[i].is_ascii_alphanumeric() || t[i] == b'_') {
            i += 1;
        }
        if i > start {
            prefix.push(String::from_utf8_lossy(&t[start..i]).into_owned());
            let j = skip_space(t, i);
            if t[j..].starts_with(b"::") {
                return tree(t, j + 2, prefix, out);
            }
        }
        out.push(prefix);
        i
    }
    let mut out = Vec::new();
    tree(text.as_bytes(), 0, Vec::new(), &mut out);
    out
}

struct Graph {
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// `(file, path)` of every `engine::` path outside `src/engine/` that breaks the rule.
    facade_breaks: Vec<(String, String)>,
}

fn build(src: &Path) -> Graph {
    let top = modules_in(src);
    let engine_subs = modules_in(&src.join("engine"));
    let node_of = |path: &[String]| -> Option<String> {
        let first = path.first()?;
        if !top.contains(first) {
            return None;
        }
        match path.get(1) {
            Some(sub) if first == "engine" && engine_subs.contains(sub) => Some(format!("engine::{sub}")),
            _ => Some(first.clone()),
        }
    };
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph { edges: BTreeMap::new(), facade_breaks: Vec::new() };
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
        let mut module: Vec<String> = rel.trim_end_matches(".rs").split('/').map(String::from).collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
            module.pop();
        }
        let me = if rel == "main.rs" { Some("main".to_string()) } else { node_of(&module) };
        let Some(me) = me else { continue };
        let all = code_only(&std::fs::read_to_string(&file).unwrap());
        let shipped = if is_test_file(&rel) { String::new() } else { without_tests(&all) };
        let outside_engine = !rel.starts_with("engine/");
        // Every path of the file (tests too) for the façade rule, the shipped ones for the graph.
        for (code, for_graph) in [(&all, false), (&shipped, true)] {
            for path in paths_in(code, &module, &rel) {
                let Some(target) = node_of(&path) else { continue };
                if !for_graph {
                    if outside_engine && path[0] == "engine" {
                        let facade_user =
                            FACADE_USERS.iter().any(|f| rel == *f || (f.ends_with('/') && rel.starts_with(f)));
                        let through_facade = path.get(1).is_some_and(|s| s == FACADE);
                        if !(rel == "main.rs" || (facade_user && through_facade)) {
                            graph.facade_breaks.push((rel.clone(), path.join("::")));
                        }
                    }
                } else if target != me {
                    graph.edges.entry(me.clone()).or_default().entry(target).or_default().insert(rel.clone());
                }
            }
        }
    }
    graph
}

/// Every absolute module path `code` (of the file `rel`, module `module`) names.
fn paths_in(code: &str, module: &[String], rel: &str) -> Vec<Vec<String>> {
    let inline = inline_modules(code);
    let b = code.as_bytes();
    let mut found: Vec<Vec<String>> = Vec::new();
    for prefix in ["crate::", "super::", "talaria::"] {
        if prefix == "talaria::" && rel != "main.rs" {
            continue;
        }
        let mut at = 0;
        while let Some(n) = code[at..].find(prefix) {
            let start = at + n;
            at = start + prefix.len();
            if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b':') {
                continue;
            }
            let base = match prefix {
                "super::" => {
                    let mut here = module.to_vec();
                    here.extend(inline.iter().filter(|(s, e, _)| *s < start && start < *e).map(|(_, _, n)| n.clone()));
                    let mut rest = start;
                    while code[rest..].starts_with("super::") {
                        here.pop();
                        rest += "super::".len();
                    }
                    at = rest;
                    here
                }
                _ => Vec::new(),
            };
            for path in paths_of(&code[at..]) {
                let mut full = base.clone();
                full.extend(path);
                found.push(full);
            }
        }
    }
    found
}

/// The strongly connected components with more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flat_map(|m| m.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    let nodes: BTreeSet<&str> =
        edges.iter().flat_map(|(a, m)| std::iter::once(a.as_str()).chain(m.keys().map(String::as_str))).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn imports_between_modules_form_no_cycle() {
    let graph = build(&src());
    let mut report = String::new();
    for component in cycles(&graph.edges) {
        report += &format!("cycle of {} modules: {}\n", component.len(), component.join(", "));
        for a in &component {
            for (b, files) in &graph.edges[a] {
                if component.contains(b) {
                    let files: Vec<_> = files.iter().take(3).cloned().collect();
                    report += &format!("  {a} -> {b}  ({})\n", files.join(", "));
                }
            }
        }
    }
    assert!(report.is_empty(), "the module map of src/lib.rs says imports point one way:\n{report}");
    // The map as it is (`-- --nocapture`): each module above everything it imports.
    let mut level: BTreeMap<String, usize> = BTreeMap::new();
    fn level_of(
        n: &str,
        edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        memo: &mut BTreeMap<String, usize>,
    ) -> usize {
        if let Some(l) = memo.get(n) {
            return *l;
        }
        let l = edges.get(n).map_or(0, |m| m.keys().map(|t| level_of(t, edges, memo) + 1).max().unwrap_or(0));
        memo.insert(n.to_string(), l);
        l
    }
    for n in graph.edges.keys() {
        level_of(n, &graph.edges, &mut level);
    }
    let mut by_level: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (n, l) in &level {
        by_level.entry(*l).or_default().push(n);
    }
    for (l, nodes) in by_level.iter().rev() {
        println!("{l:2}  {}", nodes.join(", "));
    }
}

#[test]
fn outside_the_engine_only_main_names_it_and_front_ends_use_its_facade() {
    let graph = build(&src());
    let breaks: Vec<String> = graph.facade_breaks.iter().map(|(file, path)| format!("src/{file}: {path}")).collect();
    assert!(
        breaks.is_empty(),
        "outside src/engine only main.rs names engine::, and exec/acp/subagent only engine::{FACADE}:\n{}",
        breaks.join("\n")
    );
}

/// The lines of the module map in `src/lib.rs`: the modules each names, top first.
fn documented_map(lib_rs: &str) -> Vec<Vec<String>> {
    let block = lib_rs.split("//! ```text\n").nth(1).unwrap_or("").split("//! ```").next().unwrap_or("");
    let mut lines = Vec::new();
    for line in block.lines() {
        let line = line.trim_start_matches("//!").trim_start_matches(' ');
        if line.is_empty() || line.starts_with(' ') {
            continue;
        }
        // The names end where the description starts (two spaces).
        let names = line.split("  ").next().unwrap_or("");
        let mut modules = Vec::new();
        let mut rest = names;
        while !rest.is_empty() {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(group) = rest.strip_prefix("engine::{") {
                let (inside, after) = group.split_once('}').unwrap_or((group, ""));
                modules.extend(inside.split(',').map(|m| format!("engine::{}", m.trim())));
                rest = after;
            } else {
                let end = rest.find(',').unwrap_or(rest.len());
                if !rest[..end].trim().is_empty() {
                    modules.push(rest[..end].trim().to_string());
                }
                rest = &rest[end..];
            }
        }
        lines.push(modules);
    }
    lines
}

#[test]
fn the_module_map_in_lib_rs_lists_every_module_above_what_it_imports() {
    let graph = build(&src());
    let map = documented_map(&std::fs::read_to_string(src().join("lib.rs")).unwrap());
    let rank: BTreeMap<&str, usize> =
        map.iter().enumerate().flat_map(|(i, line)| line.iter().map(move |m| (m.as_str(), i))).collect();
    let mut wrong = Vec::new();
    for (a, targets) in &graph.edges {
        for (b, files) in targets {
            match (rank.get(a.as_str()), rank.get(b.as_str())) {
                (Some(ra), Some(rb)) if ra < rb => {}
                (None, _) => wrong.push(format!("{a} is not in the map")),
                (_, None) => wrong.push(format!("{b} is not in the map")),
                _ => wrong.push(format!(
                    "{a} imports {b}, which the map lists above it or beside it ({})",
                    files.iter().next().unwrap()
                )),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "the module map of src/lib.rs is out of date:\n{}", wrong.join("\n"));
}

/// `(line, name, lines)` of every `fn` with a body in `code` (comments and strings blanked).
fn function_lengths(code: &str) -> Vec<(usize, String, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(n) = code[at..].find("fn ") {
        let start = at + n;
        at = start + 3;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let name: String = code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets; a `;` first means none.
        let mut depth = 0i32;
        let mut open = None;
        for (j, &c) in b.iter().enumerate().skip(at) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth <= 0 => break,
                b'{' if depth <= 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0;
        let mut close = b.len() - 1;
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        close = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = code[..start].matches('\n').count() + 1;
        let lines = code[start..=close].matches('\n').count() + 1;
        found.push((line, name, lines));
    }
    found
}

/// Long functions are several steps under one name: split them into named pieces.
#[test]
fn no_function_in_src_is_over_120_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for file in files {
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for (line, name, lines) in function_lengths(&code) {
            if lines > 120 {
                let rel = file.strip_prefix(src()).unwrap().display().to_string();
                long.push(format!("src/{rel}:{line}: {name} has {lines} lines"));
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines:\n{}", long.join("\n"));
}

/// The checker itself: it sees each form of path, and none in comments or strings.
#[test]
fn the_checker_reads_use_trees_super_paths_and_skips_comments_and_strings() {
    assert_eq!(
        paths_of("{engine::{jobs::{self, Job}, store}, protocol::Event as E};"),
        vec![
            vec!["engine", "jobs", "self"],
            vec!["engine", "jobs", "Job"],
            vec!["engine", "store"],
            vec!["protocol", "Event"]
        ]
    );
    assert_eq!(paths_of("engine::llm::Usage::tokens(1, 2)"), vec![vec!["engine", "llm", "Usage", "tokens"]]);
    let code = code_only("let s = \"crate::engine::x\"; // crate::engine::y\nlet c = '\"'; crate::z::w");
    assert_eq!(code.matches("crate::").count(), 1, "{code}");
    assert!(code.contains("crate::z::w"));
    let fns = function_lengths(&code_only(
        "fn a() {\n    let s = \"}\";\n}\ntrait T { fn b(&self); }\nfn c<T: Fn() -> u8>(x: [u8; 2]) -> u8 { 1 }\n",
    ));
    assert_eq!(fns, vec![(1, "a".to_string(), 3), (5, "c".to_string(), 1)]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("engine/jobs")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod engine; pub mod config; pub mod exec;").unwrap();
    std::fs::write(
        src.join("config.rs"),
        "use crate::engine::jobs::Job;\n#[cfg(test)]\nmod tests { use crate::exec::Z; }",
    )
    .unwrap();
    std::fs::write(src.join("exec.rs"), "use crate::engine::api::start; use crate::engine::jobs::Job;").unwrap();
    std::fs::write(src.join("engine/mod.rs"), "pub mod jobs; pub mod store; pub mod api;").unwrap();
    std::fs::write(src.join("engine/api.rs"), "pub use super::jobs::Job;").unwrap();
    std::fs::write(src.join("engine/jobs/mod.rs"), "use crate::config::X;\nmod tests { use super::*; }").unwrap();
    std::fs::write(src.join("engine/store.rs"), "mod tests { use super::super::jobs; }").unwrap();
    let graph = build(src);
    assert_eq!(cycles(&graph.edges), vec![vec!["config".to_string(), "engine::jobs".to_string()]]);
    assert!(graph.edges["engine::store"].contains_key("engine::jobs"), "super::super from an inline module");
    assert!(!graph.edges["config"].contains_key("exec"), "a cfg(test) module is not in the map");
    assert!(!graph.edges.contains_key("engine::jobs") || !graph.edges["engine::jobs"].contains_key("engine"));
    assert_eq!(
        graph.facade_breaks,
        vec![
            ("config.rs".to_string(), "engine::jobs::Job".to_string()),
            ("exec.rs".into(), "engine::jobs::Job".into())
        ]
    );
}
