//! What VyOS makes of a config.boot once parsed: vyos1x-config's parser
//! actions (`src/vyos1x_parser.mly` at `406158f`) build its config tree from
//! the nodes [`parse_vyos1x`] reads, and `Config_tree.render_commands` prints
//! that tree as `set` commands. Reproduced here so the project can say what
//! VyOS sees in a config without running VyOS:
//!
//! - siblings of one name merge into the first: values append, children
//!   concatenate (`Vytree.merge_children`), so `address a` twice is two
//!   values and `ethernet eth0 {…}` beside `ethernet eth1 {…}` is one
//!   `ethernet` with two children;
//! - after a merge, two children of one name anywhere in the merged node are
//!   an error (`Node "…" has two children named "…"`);
//! - children sort by VyOS's lexical-numeric order (`eth2` before `eth10`);
//! - a node with children prints only its children (a value merged into it
//!   is not printed), a node without children prints one `set` per value,
//!   or a bare `set` for none.
//!
//! Comments are not part of the reading: they are not configuration.

use std::cmp::Ordering;

use crate::config_boot::{Node, parse_vyos1x, quote_value};

/// A node of VyOS's config tree.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TreeNode {
    name: String,
    /// Written as a tag node (`name tag { … }`) by any of the merged
    /// siblings; only for printing.
    tag: bool,
    values: Vec<String>,
    children: Vec<TreeNode>,
}

/// The `set` commands VyOS's `render_commands` prints for `text`, one a
/// line, or why VyOS refuses it.
pub fn vyos_set_commands(text: &str) -> Result<String, String> {
    set_commands_of(&parse_vyos1x(text)?)
}

/// The `set` commands VyOS prints for the nodes its parser read, or why its
/// tree rules refuse them.
pub fn set_commands_of(nodes: &[Node]) -> Result<String, String> {
    let tree = config_tree(nodes, None)?;
    let mut lines = Vec::new();
    for child in &tree {
        render(child, &mut Vec::new(), &mut lines);
    }
    Ok(lines.join("\n"))
}

/// One level of the tree, as the parser's `node`/`config` rules build it:
/// convert, merge, sort, then refuse duplicate grandchildren. `parent`
/// names the enclosing node for the error, as VyOS words it.
fn config_tree(nodes: &[Node], parent: Option<&str>) -> Result<Vec<TreeNode>, String> {
    let converted = nodes.iter().map(tree_node).collect::<Result<Vec<_>, _>>()?;
    let merged = sorted(merge_siblings(converted));
    for child in &merged {
        if let Some(duplicate) = duplicate_name(&child.children) {
            let path = parent.map_or_else(|| child.name.clone(), |p| format!("{p} {}", child.name));
            return Err(format!("Node \"{path}\" has two children named \"{duplicate}\""));
        }
    }
    Ok(merged)
}

/// One parsed node: a leaf, a plain node, or a tag node (`name tag { … }`,
/// an outer node holding one inner node named by the tag).
fn tree_node(node: &Node) -> Result<TreeNode, String> {
    let Some(children) = &node.children else {
        return Ok(TreeNode {
            name: node.name.clone(),
            tag: false,
            values: node.value.iter().cloned().collect(),
            children: Vec::new(),
        });
    };
    let Some(tag) = &node.value else {
        return Ok(TreeNode {
            name: node.name.clone(),
            tag: false,
            values: Vec::new(),
            children: config_tree(children, Some(&node.name))?,
        });
    };
    let inner = TreeNode {
        name: tag.clone(),
        tag: false,
        values: Vec::new(),
        children: config_tree(children, Some(&format!("{} {tag}", node.name)))?,
    };
    Ok(TreeNode {
        name: node.name.clone(),
        tag: true,
        values: Vec::new(),
        children: vec![inner],
    })
}

/// The config VyOS reads from `nodes`, printed in one layout, as VyOS's
/// `render_config` prints a config.boot (comments left out, four spaces a
/// level, values quoted only when [`quote_value`] must): siblings merged and
/// sorted, a leaf's values one line each, a node with children without its
/// values, a tag node's children as `name tag {`. Two configs VyOS reads
/// alike print alike, unless one writes a node as a tag node and the other
/// as nested plain nodes (VyOS keeps that difference too).
pub(crate) fn normalized(nodes: &[Node]) -> Result<String, String> {
    let mut out = String::new();
    for node in &config_tree(nodes, None)? {
        print_node(node, 0, &mut out);
    }
    Ok(out)
}

fn print_node(node: &TreeNode, depth: usize, out: &mut String) {
    let indent = "    ".repeat(depth);
    if node.children.is_empty() {
        if node.values.is_empty() {
            out.push_str(&format!("{indent}{}\n", node.name));
        }
        for value in &node.values {
            out.push_str(&format!("{indent}{} {}\n", node.name, quote_value(value)));
        }
        return;
    }
    let mut block = |head: String, children: &[TreeNode]| {
        out.push_str(&format!("{indent}{head} {{\n"));
        for child in children {
            print_node(child, depth + 1, out);
        }
        out.push_str(&format!("{indent}}}\n"));
    };
    // The tag form cannot carry a child's own values (`render_config`
    // drops them); a node with such a child prints as a plain block.
    let tag_form = node.tag
        && node
            .children
            .iter()
            .all(|c| c.values.is_empty() || !c.children.is_empty());
    if tag_form {
        for child in &node.children {
            block(format!("{} {}", node.name, quote_value(&child.name)), &child.children);
        }
    } else {
        block(node.name.clone(), &node.children);
    }
}

/// `Vytree.merge_children`: each later sibling named like an earlier one is
/// folded into it (values appended, children appended then sorted).
fn merge_siblings(nodes: Vec<TreeNode>) -> Vec<TreeNode> {
    let mut out: Vec<TreeNode> = Vec::with_capacity(nodes.len());
    for node in nodes {
        match out.iter_mut().find(|n| n.name == node.name) {
            Some(first) => {
                // VyOS keeps the first sibling's flag; either one's keeps the
                // printed form independent of sibling order.
                first.tag |= node.tag;
                first.values.extend(node.values);
                first.children.extend(node.children);
                first.children = sorted(std::mem::take(&mut first.children));
            }
            None => out.push(node),
        }
    }
    out
}

/// A stable merge sort by [`lexical_numeric_compare`], as OCaml's
/// `List.sort` is. VyOS's comparison is not an order on every set of names
/// (digit runs of different lengths can make a cycle), which the standard
/// library's sorts may answer with a panic; a merge sort only asks, so names
/// a router or template chooses can cost an unusual order, never a crash.
fn sorted(mut nodes: Vec<TreeNode>) -> Vec<TreeNode> {
    if nodes.len() < 2 {
        return nodes;
    }
    let right = nodes.split_off(nodes.len() / 2);
    merge(sorted(nodes), sorted(right))
}

/// Merges two sorted runs, the left one first among equals.
fn merge(left: Vec<TreeNode>, right: Vec<TreeNode>) -> Vec<TreeNode> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let right_first = lexical_numeric_compare(r.name.as_bytes(), l.name.as_bytes()) == Ordering::Less;
        out.extend(if right_first { right.next() } else { left.next() });
    }
    out.extend(left);
    out.extend(right);
    out
}

/// The first name that two of `nodes` share, in sorted-name order.
fn duplicate_name(nodes: &[TreeNode]) -> Option<&str> {
    let mut names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort_unstable();
    names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// `Renderer.render_commands`: a leaf's values each as `set <path> '<value>'`
/// (the value through `Util.escape_string`, inside single quotes that are
/// not escaped), a valueless leaf as `set <path>`, a node's children in order.
fn render<'a>(node: &'a TreeNode, path: &mut Vec<&'a str>, lines: &mut Vec<String>) {
    path.push(&node.name);
    if node.children.is_empty() {
        let joined = path.join(" ");
        if node.values.is_empty() {
            lines.push(format!("set {joined}"));
        }
        for value in &node.values {
            lines.push(format!("set {joined} '{}'", escape_string(value)));
        }
    } else {
        for child in &node.children {
            render(child, path, lines);
        }
    }
    path.pop();
}

/// vyos1x-config's `Util.escape_string`: `"` and `\` get a backslash,
/// newline, tab, carriage return and backspace their C escapes, other
/// control bytes (and DEL) a three-digit decimal escape; printable ASCII and
/// every byte of a multi-byte character stay as they are.
pub(crate) fn escape_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            ' '..='~' => out.push(c),
            c if u32::from(c) < 0x80 => out.push_str(&format!("\\{:03}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// vyos1x-config's `lexical_numeric_compare.c`, step for step (including
/// its bookkeeping after digit runs of different lengths, so `a01b` and
/// `a1b` order as VyOS orders them): non-digit stretches compare as bytes,
/// digit runs as numbers (a C `int`, so a very long run wraps), and a tie
/// goes to the shorter string. A byte past the end reads as the NUL the C
/// code meets there.
pub(crate) fn lexical_numeric_compare(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let (mut len1, mut len2) = (a.len(), b.len());
    let mut len = len1.min(len2);
    let (mut s1, mut s2, mut p1, mut p2, mut pos) = (0usize, 0usize, 0usize, 0usize, 0usize);
    loop {
        while pos < len && (!at(a, s1).is_ascii_digit() || !at(b, s2).is_ascii_digit()) {
            (s1, s2, pos) = (s1 + 1, s2 + 1, pos + 1);
        }
        if pos > 0 {
            let prefix = bytes_at(a, p1, pos).cmp(&bytes_at(b, p2, pos));
            if prefix != Ordering::Equal {
                return prefix;
            }
            if pos == len {
                return len1.cmp(&len2);
            }
        }
        (len, len1, len2) = (len - pos, len1 - pos, len2 - pos);
        let (n1, pos1) = digit_run(a, &mut s1, len1);
        let (n2, pos2) = digit_run(b, &mut s2, len2);
        if n1 != n2 {
            return n1.cmp(&n2);
        }
        if pos1 == len1 || pos2 == len2 {
            return len1.cmp(&len2);
        }
        pos = pos1.min(pos2);
        (p1, p2) = (s1, s2);
        (len, len1, len2) = (len.saturating_sub(pos), len1 - pos, len2 - pos);
        pos = 0;
        if at(a, s1) == 0 || at(b, s2) == 0 {
            // The C loop ends here without a return; treat as equal.
            return Ordering::Equal;
        }
    }
}

/// `len` bytes of `s` from `from`, NUL past the end.
fn bytes_at(s: &[u8], from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| s.get(i).copied().unwrap_or(0)).collect()
}

/// The digit run at `*at` (at most `limit` bytes) as a wrapping C `int`, and
/// its length; advances `*at` past it.
fn digit_run(s: &[u8], at: &mut usize, limit: usize) -> (i32, usize) {
    let (mut n, mut count) = (0i32, 0usize);
    while count < limit && s.get(*at).is_some_and(u8::is_ascii_digit) {
        n = n.wrapping_mul(10).wrapping_add(i32::from(s[*at] - b'0'));
        *at += 1;
        count += 1;
    }
    (n, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_order_by_value_and_ties_by_length() {
        let order = |a: &str, b: &str| lexical_numeric_compare(a.as_bytes(), b.as_bytes());
        assert_eq!(order("eth2", "eth10"), Ordering::Less);
        assert_eq!(order("eth10", "eth2"), Ordering::Greater);
        assert_eq!(order("b", "a"), Ordering::Greater);
        assert_eq!(order("1", "01"), Ordering::Less);
        assert_eq!(order("a1b", "a01b"), Ordering::Less);
        assert_eq!(order("x", "x"), Ordering::Equal);
        assert_eq!(order("x", "xy"), Ordering::Less);
    }

    #[test]
    fn siblings_merge_sort_and_render_as_vyos_does() {
        let text = "interfaces {\n ethernet eth10 {\n  address b\n }\n ethernet eth2 {\n  address \"a\\\"'\"\n  address c\n }\n}\nsystem {\n disable\n}\n";
        assert_eq!(
            vyos_set_commands(text).unwrap(),
            "set interfaces ethernet eth2 address 'a\\\"''\nset interfaces ethernet eth2 address 'c'\n\
             set interfaces ethernet eth10 address 'b'\nset system disable"
        );
    }

    #[test]
    fn duplicate_children_after_a_merge_are_refused_with_vyos_words() {
        let err = vyos_set_commands("x {\n e eth0 {\n }\n e eth0 {\n }\n}\n").unwrap_err();
        assert_eq!(err, "Node \"x e\" has two children named \"eth0\"");
    }

    #[test]
    fn names_that_vyos_orders_in_a_cycle_sort_without_a_panic() {
        let order = |a: &str, b: &str| lexical_numeric_compare(a.as_bytes(), b.as_bytes());
        // The cycle: each is below the next, and the last below the first.
        assert_eq!(order("0b", "000"), Ordering::Less);
        assert_eq!(order("000", "0a0b"), Ordering::Less);
        assert_eq!(order("0a0b", "0b"), Ordering::Less);
        let node = |name: &str| TreeNode {
            name: name.to_owned(),
            tag: false,
            values: Vec::new(),
            children: Vec::new(),
        };
        // Sibling lists mixing such names, which the standard library's
        // sort can refuse with a panic.
        let pool = [
            "0b", "000", "0a0b", "0b0", "00a", "0a00b", "1", "01", "a1b", "a01b", "0", "00", "0a", "10",
        ];
        let mut seed: u64 = 1;
        for round in 0..200 {
            let names: Vec<&str> = (0..20 + round * 15)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    pool[(seed >> 33) as usize % pool.len()]
                })
                .collect();
            let out = sorted(names.iter().map(|n| node(n)).collect());
            assert_eq!(out.len(), names.len());
        }
        // Ordinary names come out as any stable sort by the comparison puts them.
        let plain = ["eth10", "eth2", "eth1", "lo", "eth2", "bond0"];
        let mut expected = plain.to_vec();
        expected.sort_by(|a, b| order(a, b));
        let got: Vec<String> = sorted(plain.iter().map(|n| node(n)).collect())
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn control_characters_escape_like_ocaml() {
        assert_eq!(escape_string("a\u{1}\u{7f}\tü\u{c}"), "a\\001\\127\\tü\\012");
    }
}
