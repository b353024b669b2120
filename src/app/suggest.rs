//! Suggestions for mistyped subcommands and long flags, where clap has none.
//!
//! clap suggests by Jaro similarity above 0.7, which misses short typos:
//! `tfbench rn` got "unrecognized subcommand 'rn'" and nothing else. This
//! fallback looks for the closest name by edit distance (one edit for names
//! up to four characters, two beyond) among the subcommands or long flags of
//! the command the user was typing, and adds it to clap's own error, which
//! then prints it as its usual "tip: a similar ... exists".

use crate::cli::Cli;
use clap::CommandFactory;
use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Levenshtein distance with adjacent transpositions (optimal string
/// alignment), over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `typed` within the allowed distance (ties: the
/// first in `candidates`' order), if any.
pub fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if typed.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .into_iter()
        .map(|c| (edit_distance(typed, c), c))
        .filter(|(d, c)| *d <= limit && *d < c.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `err` with a suggestion added when it is an unknown subcommand or long
/// flag and clap found no suggestion itself; `args` is the whole command
/// line (program name first), used to find which subcommand was typed.
pub fn with_suggestion(mut err: clap::Error, args: &[String]) -> clap::Error {
    let mut root = Cli::command();
    root.build();
    // The deepest subcommand the words before the error name.
    let mut cmd = &root;
    for a in args.iter().skip(1).filter(|a| !a.starts_with('-')) {
        match cmd.find_subcommand(a) {
            Some(sub) => cmd = sub,
            None => break,
        }
    }
    match err.kind() {
        ErrorKind::InvalidSubcommand if err.get(ContextKind::SuggestedSubcommand).is_none() => {
            let Some(ContextValue::String(typed)) = err.get(ContextKind::InvalidSubcommand) else {
                return err;
            };
            let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
            if let Some(best) = closest(typed, names) {
                let best = best.to_string();
                err.insert(ContextKind::SuggestedSubcommand, ContextValue::Strings(vec![best]));
            }
        }
        ErrorKind::UnknownArgument if err.get(ContextKind::SuggestedArg).is_none() => {
            let Some(ContextValue::String(typed)) = err.get(ContextKind::InvalidArg) else { return err };
            let Some(name) = typed.strip_prefix("--") else { return err };
            let name = name.split('=').next().unwrap_or(name);
            let longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
            if let Some(best) = closest(name, longs.iter().copied()) {
                let best = format!("--{best}");
                err.insert(ContextKind::SuggestedArg, ContextValue::String(best));
            }
        }
        _ => {}
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn error_text(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let err = Cli::try_parse_from(&args).expect_err("a usage error");
        with_suggestion(err, &args).to_string()
    }

    #[test]
    fn distance_counts_edits_and_swaps() {
        assert_eq!(edit_distance("rn", "run"), 1);
        assert_eq!(edit_distance("rnu", "run"), 1);
        assert_eq!(edit_distance("sysifno", "sysinfo"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("merge", "merge"), 0);
    }

    #[test]
    fn closest_needs_a_near_name() {
        let names = ["list", "run", "sysinfo", "report"];
        assert_eq!(closest("rn", names), Some("run"));
        assert_eq!(closest("lsit", names), Some("list"));
        assert_eq!(closest("xyz", names), None);
        // One letter is no evidence: "r" is one edit from nothing useful.
        assert_eq!(closest("q", ["a"]), None);
    }

    #[test]
    fn short_subcommand_typos_get_a_tip() {
        let text = error_text(&["tfbench", "rn"]);
        assert!(text.contains("unrecognized subcommand 'rn'"), "{text}");
        assert!(text.contains("a similar subcommand exists: 'run'"), "{text}");
        let nested = error_text(&["tfbench", "baseline", "lst"]);
        assert!(nested.contains("'list'"), "{nested}");
    }

    #[test]
    fn long_flag_typos_get_a_tip_for_the_typed_subcommand() {
        let text = error_text(&["tfbench", "run", "--qick"]);
        assert!(text.contains("'--quick'"), "{text}");
        let text = error_text(&["tfbench", "report", "x.json", "--htm", "x.html"]);
        assert!(text.contains("'--html'"), "{text}");
        let none = error_text(&["tfbench", "run", "--zzzzzz"]);
        assert!(!none.contains("similar"), "{none}");
    }
}
