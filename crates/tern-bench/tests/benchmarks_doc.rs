//! docs/benchmarks.md is for people who want the figures: it opens with one summary
//! table (each measure, Tern's figure, the same-run baseline, the ratio, the target,
//! met or not, the date, the command), and the history follows, newest first. Every
//! figure of a row is one its dated section of the history gives (none invented), and a
//! ratio is one the section gives or the row's own figure over its baseline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

const COLUMNS: [&str; 8] = [
    "measure",
    "Tern",
    "baseline (same run)",
    "ratio",
    "target",
    "met",
    "date",
    "command",
];

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of a table row, `\|` kept inside a cell.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The numbers of a text, as written (`33,308` is one number), in order; digits in a
/// word (`1M`, `p99`, `100k`, `sha256`) or a date are not figures.
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let digit_at = |j: usize| chars.get(j).is_some_and(char::is_ascii_digit);
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_digit() || (matches!(chars[i], ',' | '.') && digit_at(i + 1)))
        {
            i += 1;
        }
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
        let before = start.checked_sub(1).map(|j| chars[j]);
        let after = chars.get(i).copied();
        if !(before.is_some_and(word) || after.is_some_and(word)) {
            out.push(chars[start..i].iter().collect());
        }
    }
    out
}

fn value(n: &str) -> f64 {
    n.replace(',', "").parse().unwrap()
}

#[test]
fn the_summary_table_opens_the_document_and_takes_its_figures_from_the_history() {
    let doc = doc();
    let headings: Vec<&str> = doc.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings.first().copied(),
        Some("## Summary"),
        "the first section: {headings:?}"
    );
    let summary = doc.split("## Summary").nth(1).unwrap();
    let table: Vec<&str> = summary
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(cells(table[0]), COLUMNS);
    let rows = &table[2..];
    assert!(rows.len() >= 20, "{} rows", rows.len());

    // The history: dated sections, newest first.
    let history = doc
        .split("## History (newest first)")
        .nth(1)
        .expect("a history");
    let sections: Vec<(String, &str)> = history
        .split("\n### ")
        .skip(1)
        .map(|s| {
            let title = s.lines().next().unwrap();
            let date = title
                .split(|c: char| !(c.is_ascii_digit() || c == '-'))
                .find(|w| w.len() == 10 && w.as_bytes()[4] == b'-')
                .unwrap_or_else(|| panic!("no date in {title:?}"))
                .to_string();
            (date, s)
        })
        .collect();
    assert!(sections.len() >= 20);
    for pair in sections.windows(2) {
        assert!(
            pair[0].0 >= pair[1].0,
            "not newest first: {} then {}",
            pair[0].0,
            pair[1].0
        );
    }

    for row in rows {
        let c = cells(row);
        assert_eq!(c.len(), COLUMNS.len(), "{row}");
        assert!(
            c.iter().all(|cell| !cell.is_empty()),
            "an empty cell: {row}"
        );
        let (tern, baseline, ratio, met, date, command) =
            (&c[1], &c[2], &c[3], &c[5], &c[6], &c[7]);
        assert!(
            met == "—" || met == "yes" || met.starts_with("no"),
            "met: {met:?} in {row}"
        );
        assert!(
            command.starts_with('`') && command.ends_with('`'),
            "the command, as code: {row}"
        );
        let text: String = sections
            .iter()
            .filter(|(d, _)| d == date)
            .map(|(_, s)| *s)
            .collect();
        assert!(!text.is_empty(), "no history section of {date}: {row}");
        let said = numbers(&text);
        for n in numbers(tern).iter().chain(numbers(baseline).iter()) {
            assert!(
                said.contains(n),
                "{n} is in no section of {date} (invented?): {row}"
            );
        }
        let (t, b) = (numbers(tern), numbers(baseline));
        for r in numbers(ratio) {
            let close = |q: f64| (q - value(&r)).abs() <= 0.006_f64.max(value(&r) * 0.01);
            let computed = t
                .iter()
                .any(|t| b.iter().any(|b| close(value(t) / value(b))));
            assert!(
                said.contains(&r) || computed,
                "the ratio {r} is neither given by the section of {date} nor {t:?} / {b:?}: {row}"
            );
        }
    }
}

#[test]
fn numbers_are_read_as_written() {
    assert_eq!(
        numbers("33,308 hb/s, p99 2.68 ms, 0.90 cores"),
        ["33,308", "2.68", "0.90"]
    );
    assert_eq!(numbers("1M hosts, 1.06× at 100k"), ["1.06"]);
    assert_eq!(numbers("2026-11-27: 29.3–36.6 ms"), ["29.3", "36.6"]);
}
