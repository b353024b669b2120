//! Where in a config file's text a key or a value is written, so errors
//! about what the file says (not only parse errors) name its line and column.

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// First line where `key` is defined: as `key =`, `key:`, or inside a header.
pub(super) fn locate_key(text: &str, key: &str) -> Option<(usize, usize)> {
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let rest = trimmed.strip_prefix(key).map(|r| r.trim_start());
        if let Some(r) = rest
            && (r.starts_with('=') || r.starts_with(':'))
        {
            return Some((i + 1, indent + 1));
        }
        if trimmed.starts_with('[')
            && let Some(pos) = trimmed.find(key)
        {
            let bounded = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '-');
            if bounded(trimmed[..pos].chars().last()) && bounded(trimmed[pos + key.len()..].chars().next()) {
                return Some((i + 1, indent + pos + 1));
            }
        }
    }
    None
}

/// Where `key` is written inside the `index`-th (0-based) item of the
/// array of tables `table`: TOML `[[table]]` blocks (their `[table.x]`
/// sub-tables included) or the items of a YAML `table:` block list. Falls
/// back to the item's first line when the key is not written there.
pub(super) fn locate_in_item(text: &str, table: &str, index: usize, key: &str) -> Option<(usize, usize)> {
    let (start, end) = item_extent(text, table, index)?;
    let name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let body = &text[..end];
    let at = find_bounded(body, start, key, name_char, true)
        // A `[table.key]` sub-table header.
        .or_else(|| find_bounded(body, start, &format!("{table}.{key}"), name_char, false))
        .unwrap_or(start);
    Some(line_col(text, at))
}

/// Byte range of the `index`-th item of `table` (see [`locate_in_item`]).
fn item_extent(text: &str, table: &str, index: usize) -> Option<(usize, usize)> {
    let header = format!("[[{table}]]");
    let mut offset = 0;
    let mut starts = Vec::new();
    let mut ends_at = None;
    // TOML: an item runs from its header to the next header that is not
    // one of its own sub-tables.
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with(&header) {
            if starts.len() == index + 1 {
                ends_at = Some(offset);
                break;
            }
            starts.push(offset);
        } else if t.starts_with('[') && !t.starts_with(&format!("[{table}.")) && starts.len() == index + 1 {
            ends_at = Some(offset);
            break;
        }
        offset += line.len();
    }
    if starts.len() == index + 1 {
        return Some((starts[index], ends_at.unwrap_or(text.len())));
    }
    // YAML: `table:` at the left margin, then `- ` items at one indentation.
    let mut offset = 0;
    let mut in_list = false;
    let mut indent = None;
    let mut starts = Vec::new();
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        let ind = line.len() - t.len();
        if !in_list {
            in_list = ind == 0 && t.trim_end() == format!("{table}:");
        } else if !t.trim().is_empty() && !t.starts_with('#') {
            if ind == 0 && !t.starts_with('-') {
                break;
            }
            if t.starts_with('-') && indent.is_none_or(|i| i == ind) {
                indent = Some(ind);
                if starts.len() == index + 1 {
                    return Some((starts[index], offset));
                }
                starts.push(offset + ind);
            }
        }
        offset += line.len();
    }
    (starts.len() == index + 1).then(|| (starts[index], offset))
}

/// Where `value` of parameter `key` is written, below the `scope` tokens
/// (`suites`, the suite, `benchmarks`, the benchmark) found in that order:
/// TOML headers, dotted keys and inline tables, and YAML nesting all name
/// them in order. Falls back to the key when the value is not found as
/// written (e.g. `1_024`).
pub(super) fn locate_value(text: &str, scope: &[&str], key: &str, value: &str) -> Option<(usize, usize)> {
    let name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let value_char = |c: char| name_char(c) || c == '.' || c == '/';
    let mut at = 0;
    for token in scope {
        at = find_bounded(text, at, token, name_char, false)? + token.len();
    }
    let key_at = find_bounded(text, at, key, name_char, true)?;
    let end = value_extent(text, key_at);
    let found = find_bounded(&text[..end], key_at + key.len(), value, value_char, false);
    Some(line_col(text, found.unwrap_or(key_at)))
}

/// The first occurrence of `token` at or after `from` that is not part of a
/// longer name and not in a comment; with `key`, only where it is assigned
/// (`token =`, `token:`, possibly quoted).
fn find_bounded(
    text: &str,
    from: usize,
    token: &str,
    word: impl Fn(char) -> bool,
    key: bool,
) -> Option<usize> {
    let mut start = from;
    while let Some(i) = text.get(start..)?.find(token).map(|i| i + start) {
        start = i + token.len();
        let line_start = text[..i].rfind('\n').map_or(0, |p| p + 1);
        let line = &text.as_bytes()[line_start..i];
        let in_comment =
            (0..line.len()).any(|j| line[j] == b'#' && (j == 0 || line[j - 1].is_ascii_whitespace()));
        let before = text[..i].chars().next_back();
        let after = text[start..].chars().next();
        if in_comment || before.is_some_and(&word) || after.is_some_and(&word) {
            continue;
        }
        let assigned = || {
            let rest = text[start..].trim_start_matches(['"', '\'']).trim_start_matches([' ', '\t']);
            rest.starts_with('=') || rest.starts_with(':')
        };
        if !key || assigned() {
            return Some(i);
        }
    }
    None
}

/// End (byte offset) of the value assigned at `key_at`: its line, the lines
/// of a bracketed list or table it opens, and the lines of a YAML block list
/// indented below it.
fn value_extent(text: &str, key_at: usize) -> usize {
    let line_start = text[..key_at].rfind('\n').map_or(0, |p| p + 1);
    let indent = key_at - line_start;
    let mut depth = 0i32;
    let mut end = key_at;
    let mut first = true;
    for line in text[key_at..].split_inclusive('\n') {
        let trimmed = line.trim_start();
        let block_item = trimmed.starts_with('-') && line.len() - trimmed.len() > indent;
        if !first && depth <= 0 && !block_item {
            break;
        }
        first = false;
        let mut quote = None;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => depth += 1,
                (None, ']' | '}') => depth -= 1,
                _ => {}
            }
        }
        end += line.len();
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_located_for_semantic_errors() {
        let text = "[run]\nthreads = 2\n\n[suites.tensr.harness]\nsample_size = 3\n";
        assert_eq!(locate_key(text, "threads"), Some((2, 1)));
        assert_eq!(locate_key(text, "tensr"), Some((4, 9)));
        assert_eq!(locate_key(text, "tens"), None);
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn keys_are_located_in_their_array_item() {
        let toml = "[run]\nsuites = [\"command\"]\n\n[[command]]\nname = \"a\"\nargv = [\"true\"]\n\n\
                    [[command]]\nname = \"b\"\nargv = []\n[command.params]\nn = [1]\n\n[harness]\nn = 3\n";
        assert_eq!(locate_in_item(toml, "command", 1, "argv"), Some((10, 1)));
        assert_eq!(locate_in_item(toml, "command", 0, "argv"), Some((6, 1)));
        assert_eq!(locate_in_item(toml, "command", 1, "n"), Some((12, 1)));
        assert_eq!(locate_in_item(toml, "command", 0, "n"), Some((4, 1)), "absent: the item's header");
        assert_eq!(locate_in_item(toml, "command", 2, "argv"), None);
        let yaml = "run:\n  suites: [command]\ncommand:\n  - name: a\n    argv: [\"true\"]\n  - name: b\n    argv: []\n    params:\n      n: [1]\nharness:\n  n: 3\n";
        assert_eq!(locate_in_item(yaml, "command", 1, "argv"), Some((7, 5)));
        assert_eq!(locate_in_item(yaml, "command", 1, "n"), Some((9, 7)));
        assert_eq!(locate_in_item(yaml, "command", 0, "n"), Some((4, 3)));
    }

    #[test]
    fn parameter_values_are_located_in_their_benchmark_section() {
        let toml = "[run]\nsuites = [\"inference\"]  # f33 in a comment\nthreads = 1\n\n\
                    [suites.inference.benchmarks.encoder]\ndtype = \"f32\"\n\n\
                    [suites.inference.benchmarks.decode]\nbatch = [1, 2]\ndtype = [\n  \"f32\",\n  \"f33\",\n]\n";
        let scope = ["suites", "inference", "benchmarks", "decode"];
        assert_eq!(locate_value(toml, &scope, "dtype", "f33"), Some((12, 4)));
        assert_eq!(locate_value(toml, &scope, "dtype", "f32"), Some((11, 4)), "not the encoder's f32");
        assert_eq!(locate_value(toml, &scope, "batch", "2"), Some((9, 13)));
        assert_eq!(locate_value(toml, &scope, "batch", "1_0"), Some((9, 1)), "unfound value: the key");
        assert_eq!(locate_value(toml, &scope, "threads", "1"), None, "[run] is outside the scope");
        let yaml = "suites:\n  tensor:\n    benchmarks:\n      matmul:\n        threads: 1\n        impl:\n          - gemm\n          - blas\n        shape: 8x8x8\n";
        let scope = ["suites", "tensor", "benchmarks", "matmul"];
        assert_eq!(locate_value(yaml, &scope, "impl", "blas"), Some((8, 13)));
        assert_eq!(locate_value(yaml, &scope, "shape", "8x8x8"), Some((9, 16)));
        assert_eq!(locate_value(yaml, &scope, "impl", "8x8x8"), Some((6, 9)), "the next key is not the list");
        let dotted = "[suites.tensor]\nbenchmarks.matmul.impl = [\"gemm\", \"blas\"]\n";
        assert_eq!(locate_value(dotted, &scope, "impl", "blas"), Some((2, 36)));
    }
}
