//! No production function over 80 lines (issue #18): a function that long
//! holds several steps without a name for each. Production code is every
//! `src/` of the workspace outside `#[cfg(test)]` modules (inline, or files
//! included by `#[cfg(test)] mod x;`); `tests/`, `benches/` and `examples/`
//! are test code. A function counts from the line of its `fn` to the line
//! of its closing brace.

use std::collections::HashSet;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

const LIMIT: usize = 80;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `source` with comments, string literals and character literals replaced
/// by spaces (newlines kept), so braces and keywords in them do not count.
fn blank(source: &str) -> Vec<u8> {
    let s = source.as_bytes();
    let mut out = s.to_vec();
    let wipe = |out: &mut Vec<u8>, range: Range<usize>| {
        for b in &mut out[range] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < s.len() {
        let end = if s[i..].starts_with(b"//") {
            s[i..].iter().position(|b| *b == b'\n').map_or(s.len(), |n| i + n)
        } else if s[i..].starts_with(b"/*") {
            block_comment_end(s, i)
        } else if let Some(end) = raw_string_end(s, i).filter(|_| i == 0 || !ident(s[i - 1])) {
            end
        } else if s[i] == b'"' {
            string_end(s, i + 1)
        } else if s[i] == b'\'' {
            char_literal_end(source, i).unwrap_or(i + 1)
        } else {
            i + 1
        };
        if end > i + 1 {
            wipe(&mut out, i..end);
        }
        i = end;
    }
    out
}

fn block_comment_end(s: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i < s.len() {
        if s[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if s[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    s.len()
}

/// The end of `r"…"`, `r#"…"#`, `br"…"` starting at `start`, if one does.
fn raw_string_end(s: &[u8], start: usize) -> Option<usize> {
    let mut i = start + usize::from(s[start] == b'b');
    if s.get(i) != Some(&b'r') {
        return None;
    }
    i += 1;
    let hashes = s[i..].iter().take_while(|b| **b == b'#').count();
    if s.get(i + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = i + hashes + 1;
    Some(
        s[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(s.len(), |n| body + n + close.len()),
    )
}

/// The end of a string whose body starts at `body` (after its `"`).
fn string_end(s: &[u8], body: usize) -> usize {
    let mut i = body;
    while i < s.len() && s[i] != b'"' {
        i += if s[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(s.len())
}

/// The end of the character literal at `start` (`'x'`, `'\n'`,
/// `'\u{1F600}'`); `None` for a lifetime or a label.
fn char_literal_end(source: &str, start: usize) -> Option<usize> {
    let rest = &source[start + 1..];
    let first = rest.chars().next()?;
    if first == '\\' {
        // The escaped character, then up to the closing quote (`\u{…}`).
        let close = rest.get(2..)?.find('\'')?;
        return (close < 10).then_some(start + 1 + 2 + close + 1);
    }
    let after = first.len_utf8();
    (rest.as_bytes().get(after) == Some(&b'\'')).then_some(start + 1 + after + 1)
}

/// The index of the brace closing the one at `open`.
fn closing_brace(s: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, b) in s.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    s.len() - 1
}

fn skip_space(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn word_at(s: &[u8], i: usize) -> &str {
    let n = s[i..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count();
    std::str::from_utf8(&s[i..i + n]).unwrap()
}

/// A `#[cfg(test)]` module of a file.
struct TestModule {
    name: String,
    /// The byte range of its body when it is inline (`mod name { … }`).
    body: Option<Range<usize>>,
    /// Its file when a `#[path = "…"]` names it, relative to the including
    /// file's folder.
    path: Option<String>,
}

/// Each `#[cfg(test)] mod name` in `s`, the blanked `source` (string
/// literals are read from `source` itself, at the same offsets).
fn test_modules(s: &[u8], source: &[u8]) -> Vec<TestModule> {
    let mut found = Vec::new();
    let needle = b"#[cfg(test)]";
    let mut from = 0;
    while let Some(at) = s[from..].windows(needle.len()).position(|w| w == needle) {
        let mut i = skip_space(s, from + at + needle.len());
        from = i;
        // Further attributes, and a visibility.
        let mut path = None;
        while s[i..].starts_with(b"#[") {
            let end = i + s[i..].iter().position(|b| *b == b']').unwrap_or(0);
            path = path.or_else(|| path_attribute(&source[i..end]));
            i = skip_space(s, end + 1);
        }
        if word_at(s, i) == "pub" {
            i = skip_space(s, i + 3);
            if s.get(i) == Some(&b'(') {
                i = skip_space(s, i + s[i..].iter().position(|b| *b == b')').unwrap_or(0) + 1);
            }
        }
        if word_at(s, i) != "mod" {
            continue;
        }
        i = skip_space(s, i + 3);
        let name = word_at(s, i).to_owned();
        i = skip_space(s, i + name.len());
        let body = match s.get(i) {
            Some(b';') => None,
            Some(b'{') => Some(i..closing_brace(s, i)),
            _ => continue,
        };
        found.push(TestModule { name, body, path });
    }
    found
}

/// The file of a `#[path = "file.rs"` attribute (without its `]`).
fn path_attribute(attribute: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(attribute).ok()?;
    let value = text.strip_prefix("#[")?.trim_start().strip_prefix("path")?.trim_start();
    let quoted = value.strip_prefix('=')?.trim();
    Some(quoted.strip_prefix('"')?.strip_suffix('"')?.to_owned())
}

/// Every function of `source` with a body: name, first and last line.
fn functions(s: &[u8], skip: &[Range<usize>]) -> Vec<(String, usize, usize)> {
    let line = |i: usize| s[..i].iter().filter(|b| **b == b'\n').count() + 1;
    let mut out = Vec::new();
    for at in 0..s.len().saturating_sub(3) {
        let keyword = &s[at..at + 2] == b"fn" && s[at + 2].is_ascii_whitespace();
        if !keyword || (at > 0 && (s[at - 1].is_ascii_alphanumeric() || s[at - 1] == b'_')) {
            continue;
        }
        if skip.iter().any(|r| r.contains(&at)) {
            continue;
        }
        let name_at = skip_space(s, at + 2);
        let name = word_at(s, name_at);
        if name.is_empty() {
            continue;
        }
        // The body's brace, or a `;` for a declaration without one.
        let mut depth = 0i32;
        let mut i = name_at + name.len();
        let body = loop {
            match s.get(i) {
                None => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b';') if depth == 0 => break None,
                Some(b'{') if depth == 0 => break Some(i),
                _ => {}
            }
            i += 1;
        };
        if let Some(open) = body {
            out.push((name.to_owned(), line(at), line(closing_brace(s, open))));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "tests" | "benches" | "examples" | "target" | ".git") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Functions over `LIMIT` lines under `dirs`, as `path:first-last fn name (n lines)`.
fn long_functions(root: &Path, dirs: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    let sources: Vec<(PathBuf, String, Vec<u8>)> = files
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap();
            let blanked = blank(&text);
            (path, text, blanked)
        })
        .collect();
    // Files that are `#[cfg(test)] mod x;` of another.
    let mut test_files = HashSet::new();
    for (path, text, s) in &sources {
        let parent = path.parent().unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy();
        let dir = if matches!(stem.as_ref(), "mod" | "lib" | "main") {
            parent.to_path_buf()
        } else {
            parent.join(stem.as_ref())
        };
        for module in test_modules(s, text.as_bytes()) {
            match (&module.body, &module.path) {
                (Some(_), _) => {}
                (None, Some(file)) => {
                    test_files.insert(parent.join(file));
                }
                (None, None) => {
                    test_files.insert(dir.join(format!("{}.rs", module.name)));
                    test_files.insert(dir.join(&module.name).join("mod.rs"));
                }
            }
        }
    }
    let mut long = Vec::new();
    for (path, text, s) in sources.iter().filter(|(p, _, _)| !test_files.contains(p)) {
        let inline_tests: Vec<Range<usize>> = test_modules(s, text.as_bytes())
            .into_iter()
            .filter_map(|module| module.body)
            .collect();
        for (name, first, last) in functions(s, &inline_tests) {
            let lines = last - first + 1;
            if lines > LIMIT {
                let shown = path.strip_prefix(root).unwrap_or(path).display();
                long.push(format!("{shown}:{first}-{last} fn {name} ({lines} lines)"));
            }
        }
    }
    long.sort();
    long
}

#[test]
fn no_production_function_is_longer_than_80_lines() {
    let root = root();
    let mut dirs = vec!["operator/src".to_owned(), "xtask/src".to_owned()];
    for entry in fs::read_dir(root.join("crates")).unwrap().map(Result::unwrap) {
        dirs.push(format!("crates/{}/src", entry.file_name().to_string_lossy()));
    }
    let dirs: Vec<&str> = dirs
        .iter()
        .map(String::as_str)
        .filter(|d| root.join(d).is_dir())
        .collect();
    let long = long_functions(&root, &dirs);
    assert!(
        long.is_empty(),
        "functions over {LIMIT} lines (split them where a name explains a step):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_count_sees_through_strings_comments_and_test_modules() {
    let dir = tempfile::tempdir().unwrap();
    let body = |n: usize| "    let _x = 1;\n".repeat(n);
    let source = format!(
        "fn short() {{\n{}}}\n\
         // fn commented() {{\n\
         fn long(a: [u8; 2]) -> &'static str {{\n    let _c = '{{';\n    let _s = \"}} fn fake() {{\";\n{}    r#\"}}\"#\n}}\n\
         trait T {{ fn declared(&self); }}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n\
         #[cfg(test)]\nmod table;\n\
         #[cfg(test)]\n#[path = \"lib_cases.rs\"]\nmod cases;\n",
        body(10),
        body(80),
        body(100),
    );
    fs::create_dir_all(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), source).unwrap();
    fs::write(
        dir.path().join("src/table.rs"),
        format!("fn table() {{\n{}}}\n", body(100)),
    )
    .unwrap();
    fs::write(
        dir.path().join("src/lib_cases.rs"),
        format!("fn case_table() {{\n{}}}\n", body(100)),
    )
    .unwrap();
    assert_eq!(
        long_functions(dir.path(), &["src"]),
        ["src/lib.rs:14-98 fn long (85 lines)"]
    );
}
