//! The template-review run of `cargo xtask bench`
//! (`crates/vrouter-render/benches/template_review.rs`): the admission check
//! of the worst template the limits allow, against its budgets, and its
//! section of docs/benchmarks.md. `cargo xtask bench --only template-review`
//! runs this alone and rewrites only this section.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::{met, num, read_json};
use crate::cargo_step;

/// The section's heading; the page's other sections start with `## ` too.
pub const HEADING: &str = "## Template review, worst case";

const TIME_BUDGET_MS: f64 = 100.0;
const MEMORY_BUDGET_MIB: f64 = 32.0;

/// Runs the bench in the release profile and returns its section.
pub fn run(root: &Path) -> anyhow::Result<String> {
    let out = std::env::temp_dir().join("vrouter-bench-template-review.json");
    let env = [("VROUTER_BENCH_OUT", out.display().to_string())];
    let args = ["bench", "-p", "vrouter-render", "--bench", "template_review"];
    cargo_step::run(root, "template review run", &args, &env)?;
    Ok(render(&read_json(&out)?, &cargo_step::command_line(&env, &args)))
}

/// Runs the bench and replaces this section of `page` (appending it when the
/// page has none), leaving every other section as it was.
pub fn update_page(root: &Path, page: &Path) -> anyhow::Result<()> {
    let section = run(root)?;
    let text = std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    std::fs::write(page, replace_section(&text, HEADING, &section))
        .with_context(|| format!("writing {}", page.display()))
}

/// `page` with the section starting at `heading` (up to the next `## `
/// heading or the end) replaced by `section`, or with `section` appended.
pub(super) fn replace_section(page: &str, heading: &str, section: &str) -> String {
    let Some(start) = page.find(&format!("\n{heading}\n")) else {
        return format!("{page}{section}");
    };
    let rest = &page[start + 1..];
    let end = rest[heading.len()..]
        .find("\n## ")
        .map_or(page.len(), |at| start + 1 + heading.len() + at);
    format!("{}{section}{}", &page[..start], &page[end..])
}

fn render(figures: &Value, command: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{HEADING}\n\n`{command}` (release profile). The admission check (`TemplateEngine::review`) of the \
         worst template the limits allow: of generated templates (nested `for` loops around sibling `if`s and \
         lines of `set` commands with 1 or 8 values each), for every shape the most lines the 64 KiB size limit \
         and the check's 1 MiB text limit accept, and of those the one the check counts the most work on. Also \
         the largest template of 15 loops the size limit allows and a deep shape (15 loops around 9 `if`s \
         and 400 lines). {} reviews each, timed in one process; memory is one \
         more review in a fresh process: its peak RSS (`VmHWM`) after the review and how much that exceeds \
         its RSS just before (the review's own memory, which the budget is about).\n",
        figures["samples"]
    );
    let _ = writeln!(
        out,
        "| template | shape | size | outcome | median | max | peak RSS (over RSS before) | budget |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for row in figures["rows"].as_array().into_iter().flatten() {
        let peak_mib = num(row, "peak_rss_kib") / 1024.0;
        let grew_mib = (num(row, "peak_rss_kib") - num(row, "rss_before_kib")).max(0.0) / 1024.0;
        let max_ms = num(row, "max_ms");
        let _ = writeln!(
            out,
            "| {} | {} loops, {} ifs, {} lines × {} values | {} bytes | {} | {:.2} ms | {:.2} ms | {:.1} MiB ({:.1} MiB) | \
             ≤ {TIME_BUDGET_MS} ms, ≤ {MEMORY_BUDGET_MIB} MiB ({}) |",
            row["name"].as_str().unwrap_or("?"),
            row["loops"],
            row["ifs"],
            row["lines"],
            row["values_per_line"],
            row["bytes"],
            if row["accepted"].as_bool() == Some(true) {
                "accepted"
            } else {
                "refused"
            },
            num(row, "median_ms"),
            max_ms,
            peak_mib,
            grew_mib,
            met(max_ms <= TIME_BUDGET_MS && grew_mib <= MEMORY_BUDGET_MIB),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_in_place_or_appended() {
        let section = format!("\n{HEADING}\n\nnew\n");
        let cases = [
            ("# B\n\n## A\n\na\n", format!("# B\n\n## A\n\na\n{section}")),
            (
                &*format!("# B\n\n## A\n\na\n\n{HEADING}\n\nold\n\n## C\n\nc\n"),
                format!("# B\n\n## A\n\na\n{section}\n## C\n\nc\n"),
            ),
            (
                &*format!("# B\n\n## A\n\na\n\n{HEADING}\n\nold\n"),
                format!("# B\n\n## A\n\na\n{section}"),
            ),
        ];
        for (page, expected) in cases {
            assert_eq!(replace_section(page, HEADING, &section), expected, "{page}");
        }
    }
}
