//! Server-sent events as OpenAI-compatible servers stream them, read
//! incrementally: bytes arrive in arbitrary pieces (a line, a JSON object,
//! even a UTF-8 character may be split between reads), so whole lines are
//! buffered; `:` lines are comments (keep-alives) and skipped; `data:` lines
//! of one event are joined; a blank line ends the event. [`Chunk::parse`]
//! reads one event's JSON: a completion's or chat completion's text, the
//! usage block (`stream_options.include_usage`), an error object, `[DONE]`.

use serde_json::Value;

/// Incremental SSE parser.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    data: Vec<String>,
}

impl Parser {
    /// Feeds bytes; returns the data of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if line.starts_with(':') {
                // A comment: keep-alive or a server's note.
            } else if let Some(rest) = line.strip_prefix("data:") {
                self.data.push(rest.strip_prefix(' ').unwrap_or(rest).to_string());
            }
            // `event:`, `id:`, `retry:` and unknown fields carry nothing we count.
        }
        out
    }

    /// At the end of the stream: an event whose blank line never came.
    pub fn finish(&mut self) -> Option<String> {
        let tail = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).trim().to_string();
        if let Some(rest) = tail.strip_prefix("data:") {
            self.data.push(rest.trim_start().to_string());
        }
        (!self.data.is_empty()).then(|| std::mem::take(&mut self.data).join("\n"))
    }
}

/// What one event said.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// Generated text (possibly empty: a role-only chat delta) and the
    /// chunk's token ids where the server sends them (`token_ids`, as
    /// vLLM and `tfbench load --serve` do).
    Text(String, Vec<u32>),
    /// Token counts (`usage`), possibly with a last piece of text.
    Usage {
        /// Prompt tokens.
        prompt: Option<u32>,
        /// Completion tokens.
        completion: Option<u32>,
        /// Text in the same chunk.
        text: String,
    },
    /// `[DONE]`: the stream's end.
    Done,
}

impl Chunk {
    /// Parses one event's data; a malformed chunk or an error object is an
    /// `Err` with the reason.
    pub fn parse(data: &str) -> Result<Self, String> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Self::Done);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            let cut: String = data.chars().take(80).collect();
            format!("malformed chunk: {e} in {cut:?}")
        })?;
        if let Some(err) = v.get("error") {
            let msg =
                err.get("message").and_then(Value::as_str).map_or_else(|| err.to_string(), str::to_string);
            return Err(format!("server error in stream: {msg}"));
        }
        let choices = v.get("choices").and_then(Value::as_array);
        let mut text = String::new();
        let mut ids = Vec::new();
        for c in choices.into_iter().flatten() {
            let given = c.get("token_ids").and_then(Value::as_array).into_iter().flatten();
            ids.extend(given.filter_map(Value::as_u64).map(|i| i as u32));
            let piece = c
                .get("text")
                .and_then(Value::as_str)
                .or_else(|| c.get("delta").and_then(|d| d.get("content")).and_then(Value::as_str));
            text.push_str(piece.unwrap_or(""));
        }
        if choices.is_none() && v.get("usage").is_none_or(Value::is_null) {
            let cut: String = data.chars().take(80).collect();
            return Err(format!("malformed chunk: neither choices nor usage in {cut:?}"));
        }
        match v.get("usage").filter(|u| !u.is_null()) {
            Some(u) => {
                let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|x| x as u32);
                Ok(Self::Usage { prompt: n("prompt_tokens"), completion: n("completion_tokens"), text })
            }
            None => Ok(Self::Text(text, ids)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_comments_skipped_data_lines_joined() {
        let stream = ": ping\r\n\r\ndata: {\"choices\":[{\"text\":\"Hel\"}]}\r\n\r\ndata: {\"choices\":\r\ndata: [{\"text\":\"lo\"}]}\n\n: keep-alive\n\ndata: [DONE]\n\n";
        let bytes = stream.as_bytes();
        // Every split point gives the same events.
        for cut in 0..bytes.len() {
            let mut p = Parser::default();
            let mut ev = p.feed(&bytes[..cut]);
            ev.extend(p.feed(&bytes[cut..]));
            assert_eq!(ev.len(), 3, "cut {cut}: {ev:?}");
            assert_eq!(Chunk::parse(&ev[0]), Ok(Chunk::Text("Hel".into(), vec![])));
            assert_eq!(Chunk::parse(&ev[1]), Ok(Chunk::Text("lo".into(), vec![])));
            assert_eq!(Chunk::parse(&ev[2]), Ok(Chunk::Done));
        }
        let mut p = Parser::default();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(p.finish().as_deref(), Some("[DONE]"));
    }

    #[test]
    fn chat_deltas_usage_errors_and_malformed_chunks() {
        let chat = r#"{"choices":[{"delta":{"content":"hi"},"index":0}]}"#;
        assert_eq!(Chunk::parse(chat), Ok(Chunk::Text("hi".into(), vec![])));
        let role = r#"{"choices":[{"delta":{"role":"assistant"}}]}"#;
        assert_eq!(Chunk::parse(role), Ok(Chunk::Text(String::new(), vec![])));
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}"#;
        assert_eq!(
            Chunk::parse(usage),
            Ok(Chunk::Usage { prompt: Some(12), completion: Some(7), text: String::new() })
        );
        assert!(Chunk::parse(r#"{"choices":[{"text":"a"}"#).unwrap_err().starts_with("malformed chunk"));
        assert!(Chunk::parse(r#"{"hello":1}"#).unwrap_err().starts_with("malformed chunk"));
        let ids = r#"{"choices":[{"text":"","token_ids":[7,9]}]}"#;
        assert_eq!(Chunk::parse(ids), Ok(Chunk::Text(String::new(), vec![7, 9])));
        let err = Chunk::parse(r#"{"error":{"message":"overloaded"}}"#).unwrap_err();
        assert!(err.contains("overloaded"));
    }
}
