//! `normalize_config_boot` (what `diff` compares a router's config with)
//! against VyOS's own parser on generated pairs of configs: the same tree in
//! two layouts (siblings shuffled, a block split in two, comments, blank
//! lines, other indentation, values bare or quoted) or a changed tree (a
//! value changed, a node dropped). Two configs normalize alike exactly when
//! VyOS reads them as the same `set` commands (the one exception,
//! a tag node written as nested plain nodes, is not generated:
//! docs/vyos-config-reading.md).
//!
//! `VROUTER_VYOS_PAIRS` sets the number of pairs.

mod support;

use support::rng::Rng;
use support::vyos_oracle::vyos_read;
use vrouter_render::normalize_config_boot;

const NAMES: &[&str] = &[
    "address",
    "description",
    "eth0",
    "eth2",
    "eth10",
    "a",
    "b",
    "01",
    "1",
    "9",
    "10",
    "disable",
];
const VALUES: &[&str] = &[
    "x",
    "192.0.2.1/24",
    "a b",
    "",
    "\"q\"",
    "{",
    "#",
    "ü",
    "10",
    "9",
    "\\",
    "a\nb",
];

/// A generated node: a leaf with or without a value, a block, or a tag node.
#[derive(Clone)]
enum Gen {
    Leaf(String, Option<String>),
    Block(String, Vec<Gen>),
    Tag(String, String, Vec<Gen>),
}

fn tree(rng: &mut Rng, depth: usize) -> Vec<Gen> {
    (0..1 + rng.below(4))
        .map(|_| {
            let name = rng.pick(NAMES).to_owned();
            match if depth >= 2 { 0 } else { rng.below(3) } {
                0 => Leaf(name, rng.chance(70).then(|| rng.pick(VALUES).to_owned())),
                1 => Block(name, tree(rng, depth + 1)),
                _ => {
                    let tag = rng.pick(NAMES).to_owned();
                    Tag(name, tag, tree(rng, depth + 1))
                }
            }
        })
        .collect()
}

use Gen::{Block, Leaf, Tag};

/// How to lay a tree out.
struct Layout<'a> {
    rng: &'a mut Rng,
    shuffle: bool,
}

impl Layout<'_> {
    fn value(&mut self, v: &str) -> String {
        let plain = !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || "./-".contains(c));
        if plain && self.rng.chance(50) {
            v.to_owned()
        } else {
            format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
        }
    }

    fn print(&mut self, nodes: &[Gen], depth: usize, out: &mut String) {
        let mut order: Vec<&Gen> = nodes.iter().collect();
        if self.shuffle {
            for i in (1..order.len()).rev() {
                order.swap(i, self.rng.below(i + 1));
            }
        }
        for node in order {
            if self.shuffle && self.rng.chance(10) {
                out.push_str("/* c */\n");
            }
            let indent = if self.shuffle {
                "\t".repeat(depth)
            } else {
                "    ".repeat(depth)
            };
            match node {
                Leaf(name, None) => out.push_str(&format!("{indent}{name}\n")),
                Leaf(name, Some(v)) => {
                    let v = self.value(v);
                    out.push_str(&format!("{indent}{name} {v}\n"));
                }
                Block(name, children) => self.block(&format!("{indent}{name}"), children, depth, out),
                Tag(name, tag, children) => {
                    let tag = self.value(tag);
                    self.block(&format!("{indent}{name} {tag}"), children, depth, out);
                }
            }
        }
    }

    /// A block, split in two blocks of the same head when shuffling.
    fn block(&mut self, head: &str, children: &[Gen], depth: usize, out: &mut String) {
        let split = if self.shuffle && children.len() > 1 && self.rng.chance(30) {
            1
        } else {
            children.len()
        };
        for part in [&children[..split], &children[split..]] {
            if part.is_empty() && split != children.len() {
                continue;
            }
            out.push_str(&format!("{head} {{\n"));
            self.print(part, depth + 1, out);
            out.push_str("}\n");
            if self.shuffle && self.rng.chance(20) {
                out.push('\n');
            }
            if split == children.len() {
                break;
            }
        }
    }
}

/// `nodes` with one leaf's value changed or one node dropped.
fn changed(rng: &mut Rng, nodes: &[Gen]) -> Vec<Gen> {
    let mut out = nodes.to_vec();
    let at = rng.below(out.len());
    match &mut out[at] {
        Leaf(_, value) => *value = Some(rng.pick(VALUES).to_owned()),
        Block(_, children) | Tag(_, _, children) if !children.is_empty() && rng.chance(60) => {
            *children = changed(rng, children);
        }
        _ => {
            out.remove(at);
        }
    }
    out
}

#[test]
fn configs_normalize_alike_exactly_when_vyos_reads_them_alike() {
    let pairs: usize = std::env::var("VROUTER_VYOS_PAIRS")
        .ok()
        .map_or(2_000, |n| n.parse().unwrap());
    let mut rng = Rng(0x0dd_1a7e_0047);
    let mut texts = Vec::new();
    for _ in 0..pairs {
        let nodes = tree(&mut rng, 0);
        let other = if rng.chance(50) {
            nodes.clone()
        } else {
            changed(&mut rng, &nodes)
        };
        let mut a = String::new();
        Layout {
            rng: &mut rng,
            shuffle: false,
        }
        .print(&nodes, 0, &mut a);
        let mut b = String::new();
        Layout {
            rng: &mut rng,
            shuffle: true,
        }
        .print(&other, 0, &mut b);
        texts.push(a);
        texts.push(b);
    }
    let vyos = vyos_read(&texts);
    let (mut alike, mut different, mut refused) = (0, 0, 0);
    for (pair, verdicts) in texts.chunks(2).zip(vyos.chunks(2)) {
        let (Ok(va), Ok(vb)) = (&verdicts[0], &verdicts[1]) else {
            // VyOS refuses one (two children of one name after a merge):
            // so must the normalization.
            for (text, verdict) in pair.iter().zip(verdicts) {
                assert_eq!(normalize_config_boot(text).is_err(), verdict.is_err(), "{text:?}");
            }
            refused += 1;
            continue;
        };
        let (na, nb) = (
            normalize_config_boot(&pair[0]).unwrap(),
            normalize_config_boot(&pair[1]).unwrap(),
        );
        assert_eq!(
            na == nb,
            va == vb,
            "normalized alike: {}, VyOS reads alike: {}\n--- a\n{}--- b\n{}--- normalized a\n{na}--- normalized b\n{nb}",
            na == nb,
            va == vb,
            pair[0],
            pair[1]
        );
        if va == vb { alike += 1 } else { different += 1 }
    }
    eprintln!("{pairs} pairs: {alike} read alike, {different} read differently, {refused} refused by VyOS");
    assert!(
        alike > pairs / 5 && different > pairs / 5,
        "{alike} alike, {different} different"
    );
}
