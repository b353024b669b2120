//! The requests of a run: seeded prompt and output lengths (uniform within
//! `spread` of their means), prompt text from a seeded word sequence put
//! through the model's tokenizer (so the in-process engine and an HTTP
//! server get the same prompt), or seeded ids where there is no tokenizer.
//! Request `i` depends only on the seed and `i`.

use super::Request;
use anyhow::{Result, bail};
use rand::RngExt;

/// Words prompts are drawn from: common English, so any BPE or
/// SentencePiece vocabulary spells them in one or two tokens.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
    "will", "would", "who", "so", "no", "time", "water", "river", "light", "morning", "city", "garden",
    "stone", "window", "letter", "music", "winter", "summer", "road", "house",
];

/// How requests are drawn.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Mean prompt length (tokens).
    pub input_len: usize,
    /// Mean output length (tokens).
    pub output_len: usize,
    /// Lengths are uniform in `[mean * (1 - spread), mean * (1 + spread)]`.
    pub spread: f64,
    /// Seed of lengths and prompts.
    pub seed: u64,
}

/// Something that turns text into the model's ids.
pub trait Tokenize {
    /// The ids of `text` (no BOS).
    fn ids(&self, text: &str) -> Result<Vec<u32>>;
}

#[cfg(feature = "models")]
impl Tokenize for crate::model::tokenizer::FileTokenizer {
    fn ids(&self, text: &str) -> Result<Vec<u32>> {
        self.encode(text)
    }
}

impl Workload {
    /// Checks the lengths.
    pub fn check(&self) -> Result<()> {
        if self.input_len == 0 || self.output_len == 0 {
            bail!("prompt and output lengths must be at least 1 token");
        }
        if !(0.0..1.0).contains(&self.spread) {
            bail!("length spread must be in [0, 1), got {}", self.spread);
        }
        Ok(())
    }

    /// Most positions any request needs (prompt + output), with room for
    /// the few tokens a tokenizer may add past the drawn prompt length.
    pub fn max_positions(&self) -> usize {
        let hi = |m: usize| (m as f64 * (1.0 + self.spread)).ceil() as usize;
        hi(self.input_len) + 8 + hi(self.output_len)
    }

    fn rng(&self, i: usize) -> rand::rngs::StdRng {
        crate::util::rng(self.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn draw(&self, rng: &mut rand::rngs::StdRng, mean: usize) -> usize {
        let (lo, hi) = (mean as f64 * (1.0 - self.spread), mean as f64 * (1.0 + self.spread));
        if hi - lo < 1.0 {
            return mean.max(1);
        }
        (rng.random_range(lo..=hi).round() as usize).max(1)
    }

    /// Request `i`: ids through `tok` when given (its text kept), else
    /// seeded ids in `[1, vocab)` and a word text of the same length.
    pub fn request(&self, i: usize, tok: Option<&dyn Tokenize>, vocab: usize) -> Result<Request> {
        let mut rng = self.rng(i);
        let (n_in, n_out) = (self.draw(&mut rng, self.input_len), self.draw(&mut rng, self.output_len));
        let mut words = Vec::new();
        let (text, ids) = match tok {
            Some(t) => {
                // Whole words until the tokenizer's count reaches the length.
                let mut ids = Vec::new();
                while ids.len() < n_in {
                    let need = (n_in - ids.len()).div_ceil(2).max(1);
                    for _ in 0..need {
                        words.push(WORDS[rng.random_range(0..WORDS.len())]);
                    }
                    ids = t.ids(&words.join(" "))?;
                }
                (words.join(" "), ids)
            }
            None => {
                for _ in 0..n_in {
                    words.push(WORDS[rng.random_range(0..WORDS.len())]);
                }
                let ids = (0..n_in).map(|_| rng.random_range(1..vocab.max(2)) as u32).collect();
                (words.join(" "), ids)
            }
        };
        Ok(Request { id: i, text: Some(text), ids, max_tokens: n_out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One id per byte: a tokenizer whose counts are easy to predict.
    struct Bytes;
    impl Tokenize for Bytes {
        fn ids(&self, text: &str) -> Result<Vec<u32>> {
            Ok(text.bytes().map(u32::from).collect())
        }
    }

    #[test]
    fn requests_are_seeded_and_lengths_stay_in_their_range() {
        let w = Workload { input_len: 40, output_len: 16, spread: 0.5, seed: 9 };
        w.check().unwrap();
        let a: Vec<Request> = (0..50).map(|i| w.request(i, None, 1000).unwrap()).collect();
        let b: Vec<Request> = (0..50).map(|i| w.request(i, None, 1000).unwrap()).collect();
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.ids == y.ids && x.max_tokens == y.max_tokens && x.text == y.text)
        );
        assert!(a.iter().all(|r| (20..=60).contains(&r.ids.len()) && (8..=24).contains(&r.max_tokens)));
        assert!(a.iter().any(|r| r.ids.len() != a[0].ids.len()), "lengths vary");
        let t: Vec<Request> = (0..20).map(|i| w.request(i, Some(&Bytes), 1000).unwrap()).collect();
        for r in &t {
            assert_eq!(r.ids, Bytes.ids(r.text.as_deref().unwrap()).unwrap(), "ids are the text's");
            assert!(r.ids.len() >= 20);
        }
        assert!(Workload { input_len: 0, ..w.clone() }.check().is_err());
        assert!(Workload { spread: 1.0, ..w }.check().is_err());
    }
}
