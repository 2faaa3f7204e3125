//! Tokenizers built from a GGUF's embedded vocabulary (`tokenizer.ggml.*`), tokenizing as
//! llama.cpp does:
//!
//! * `llama` — SentencePiece BPE: the text gets a leading space (unless
//!   `tokenizer.ggml.add_space_prefix` is false), spaces become `▁`, the text is split into UTF-8
//!   characters and the adjacent pair whose concatenation is the highest-scoring vocabulary piece
//!   is merged until none is left (ties: the leftmost); a character that is no piece becomes its
//!   byte tokens `<0xNN>`.
//! * `gpt2` — byte-level BPE: the text is pre-split (GPT-2's pattern, or the Llama 3 / Qwen2 one
//!   per `tokenizer.ggml.pre`), each piece's bytes are mapped to GPT-2's printable characters and
//!   merged by `tokenizer.ggml.merges` rank.
//!
//! User-defined tokens are split out of the text first (as llama.cpp does even when special
//! tokens are not parsed); control tokens (`<s>`, ...) written in the text are plain text unless
//! [`Tokenizer::encode_special`] is asked to parse them.
//!
//! ```
//! use tensorlane_llm::tokenizer::{Tokenizer, Vocab};
//!
//! // <unk>, <s>, </s>, then pieces with scores (higher merges first)
//! let pieces = ["<unk>", "<s>", "</s>", "▁", "h", "i", "▁h", "▁hi"];
//! let scores = [0.0, 0.0, 0.0, -10.0, -11.0, -12.0, -1.0, -2.0];
//! let types = [2, 3, 3, 1, 1, 1, 1, 1];
//! let vocab = Vocab::spm(
//!     pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
//!     scores.to_vec(),
//!     types.to_vec(),
//! );
//! let tok = Tokenizer::new(vocab).unwrap();
//! assert_eq!(tok.encode("hi", true), vec![1, 7]);
//! assert_eq!(tok.decode(&[1, 7]), "hi");
//! ```

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use tensorlane_core::formats::{Catalog, Meta};

use crate::arch::{meta, meta_str};
use crate::{Error, Result};

/// Token types as GGUF stores them (`tokenizer.ggml.token_type`).
pub mod token_type {
    /// A normal piece.
    pub const NORMAL: i32 = 1;
    /// The unknown token.
    pub const UNKNOWN: i32 = 2;
    /// A control token (`<s>`, `</s>`, ...).
    pub const CONTROL: i32 = 3;
    /// A user-defined token (split out of the text before tokenizing).
    pub const USER_DEFINED: i32 = 4;
    /// An unused slot.
    pub const UNUSED: i32 = 5;
    /// A byte token `<0xNN>`.
    pub const BYTE: i32 = 6;
}

/// The tokenizer model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// `llama`: SentencePiece BPE with scores and byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with merges.
    Gpt2,
}

/// How a `gpt2` tokenizer pre-splits text (`tokenizer.ggml.pre`: `llama-bpe`/`llama3`/... are
/// [`PreSplit::Llama3`], `qwen2` is [`PreSplit::Qwen2`], `gpt-2` and any other name
/// [`PreSplit::Gpt2`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreSplit {
    /// GPT-2's pattern (`'s|'t|... | ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`).
    Gpt2,
    /// Llama 3's pattern (case-insensitive contractions, numbers of 1-3 digits, a non-letter
    /// before a word).
    Llama3,
    /// Qwen2's pattern (Llama 3's with single digits).
    Qwen2,
}

/// A vocabulary: pieces with scores and types, merges for BPE, special token ids and flags.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// Which algorithm.
    pub model: Model,
    /// Each token's text (bytes: a GGUF string need not be UTF-8).
    pub tokens: Vec<Vec<u8>>,
    /// Each token's score (SentencePiece merge priority; empty means all 0).
    pub scores: Vec<f32>,
    /// Each token's type ([`token_type`]; empty means all normal).
    pub types: Vec<i32>,
    /// BPE merges, `"left right"`, in rank order (gpt2 only).
    pub merges: Vec<String>,
    /// The pre-split pattern (gpt2 only).
    pub pre: PreSplit,
    /// Beginning-of-sequence id.
    pub bos: Option<u32>,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Unknown-token id.
    pub unk: Option<u32>,
    /// Whether [`Tokenizer::encode`] with `add_special` puts BOS first.
    pub add_bos: bool,
    /// Whether a space is put before the text (SentencePiece).
    pub add_space_prefix: bool,
}

impl Vocab {
    /// A SentencePiece (`llama`) vocabulary with llama.cpp's defaults: BOS 1, EOS 2, UNK 0,
    /// BOS added, space prefix.
    pub fn spm(tokens: Vec<Vec<u8>>, scores: Vec<f32>, types: Vec<i32>) -> Vocab {
        Vocab {
            model: Model::Spm,
            tokens,
            scores,
            types,
            merges: Vec::new(),
            pre: PreSplit::Gpt2,
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            add_bos: true,
            add_space_prefix: true,
        }
    }

    /// Reads the vocabulary a GGUF embeds (`tokenizer.ggml.model`, `.tokens`, `.scores`,
    /// `.token_type`, `.merges`, `.pre`, `.bos_token_id`, `.eos_token_id`,
    /// `.unknown_token_id`, `.add_bos_token`, `.add_space_prefix`). An error names the key that
    /// is missing or unusable, or the tokenizer model that is not supported.
    pub fn from_catalog(catalog: &Catalog) -> Result<Vocab> {
        let model = match meta_str(catalog, "tokenizer.ggml.model")? {
            Some("llama") => Model::Spm,
            Some("gpt2") => Model::Gpt2,
            Some(other) => {
                return Err(Error::Metadata {
                    key: "tokenizer.ggml.model".into(),
                    message: format!("tokenizer model '{other}' is not supported (llama, gpt2)"),
                });
            }
            None => {
                return Err(Error::Metadata {
                    key: "tokenizer.ggml.model".into(),
                    message: "missing: the file embeds no vocabulary".into(),
                });
            }
        };
        let list = |key: &str| -> Result<Option<&Vec<Meta>>> {
            match meta(catalog, key) {
                None => Ok(None),
                Some(Meta::List(v)) => Ok(Some(v)),
                Some(_) => Err(Error::Metadata {
                    key: key.into(),
                    message: "expected an array".into(),
                }),
            }
        };
        let bad = |key: &str, i: usize| Error::Metadata {
            key: key.into(),
            message: format!("item {i} has the wrong type"),
        };
        let tokens: Vec<Vec<u8>> = list("tokenizer.ggml.tokens")?
            .ok_or_else(|| Error::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                message: "missing".into(),
            })?
            .iter()
            .enumerate()
            .map(|(i, m)| match m {
                Meta::Str(s) => Ok(s.as_bytes().to_vec()),
                Meta::Bytes(b) => Ok(b.clone()),
                _ => Err(bad("tokenizer.ggml.tokens", i)),
            })
            .collect::<Result<_>>()?;
        let n = tokens.len();
        let scores: Vec<f32> = match list("tokenizer.ggml.scores")? {
            None => Vec::new(),
            Some(v) => v
                .iter()
                .enumerate()
                .map(|(i, m)| match m {
                    Meta::Float(f) => Ok(*f as f32),
                    Meta::Int(x) => Ok(*x as f32),
                    Meta::UInt(x) => Ok(*x as f32),
                    _ => Err(bad("tokenizer.ggml.scores", i)),
                })
                .collect::<Result<_>>()?,
        };
        let types: Vec<i32> = match list("tokenizer.ggml.token_type")? {
            None => Vec::new(),
            Some(v) => v
                .iter()
                .enumerate()
                .map(|(i, m)| match m {
                    Meta::Int(x) => Ok(*x as i32),
                    Meta::UInt(x) => Ok(*x as i32),
                    _ => Err(bad("tokenizer.ggml.token_type", i)),
                })
                .collect::<Result<_>>()?,
        };
        for (key, len) in [
            ("tokenizer.ggml.scores", scores.len()),
            ("tokenizer.ggml.token_type", types.len()),
        ] {
            if len != 0 && len != n {
                return Err(Error::Metadata {
                    key: key.into(),
                    message: format!("{len} items for {n} tokens"),
                });
            }
        }
        let merges: Vec<String> = match list("tokenizer.ggml.merges")? {
            None => Vec::new(),
            Some(v) => v
                .iter()
                .enumerate()
                .map(|(i, m)| match m {
                    Meta::Str(s) => Ok(s.clone()),
                    _ => Err(bad("tokenizer.ggml.merges", i)),
                })
                .collect::<Result<_>>()?,
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match crate::arch::meta_uint(catalog, key)? {
                None => Ok(None),
                Some(v) if (v as usize) < n => Ok(Some(v as u32)),
                Some(v) => Err(Error::Metadata {
                    key: key.into(),
                    message: format!("token id {v} is outside the vocabulary of {n}"),
                }),
            }
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            match meta(catalog, key) {
                None => Ok(None),
                Some(Meta::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(Error::Metadata {
                    key: key.into(),
                    message: "expected a boolean".into(),
                }),
            }
        };
        let pre = match meta_str(catalog, "tokenizer.ggml.pre")?.unwrap_or("default") {
            "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" | "falcon3" | "pixtral" => PreSplit::Llama3,
            "qwen2" | "deepseek-r1-qwen" => PreSplit::Qwen2,
            // "gpt-2", "default" and the pre-tokenizers not listed: GPT-2's pattern
            _ => PreSplit::Gpt2,
        };
        let (bos, eos, unk) = match model {
            Model::Spm => (Some(1), Some(2), Some(0)),
            Model::Gpt2 => (Some(11), Some(11), None),
        };
        let bos = id("tokenizer.ggml.bos_token_id")?.or(bos.filter(|&b| (b as usize) < n));
        let eos = id("tokenizer.ggml.eos_token_id")?.or(eos.filter(|&b| (b as usize) < n));
        let unk = id("tokenizer.ggml.unknown_token_id")?.or(unk.filter(|&b| (b as usize) < n));
        Ok(Vocab {
            model,
            tokens,
            scores,
            types,
            merges,
            pre,
            bos,
            eos,
            unk,
            add_bos: flag("tokenizer.ggml.add_bos_token")?.unwrap_or(model == Model::Spm || pre == PreSplit::Llama3),
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?.unwrap_or(model == Model::Spm),
        })
    }
}

impl Vocab {
    /// Reads a Hugging Face `tokenizer.json` with a `BPE` model into the equivalent vocabulary:
    /// byte-level BPE (a `ByteLevel` pre-tokenizer; the `Split` regex picks [`PreSplit`]) as
    /// [`Model::Gpt2`] with the file's merges; SentencePiece-style BPE (`▁` for spaces,
    /// `byte_fallback`) as [`Model::Spm`] with each piece scored by the rank of the first merge
    /// that makes it. Special added tokens are control tokens (the `unk_token` unknown), other
    /// added tokens user-defined, `<0xNN>` byte tokens; BOS comes from a `TemplateProcessing`
    /// post-processor that starts with a special token, else from `bos` (`config.json`'s
    /// `bos_token_id`), EOS from `eos`. Other tokenizer models (Unigram, WordPiece) are refused.
    pub fn from_tokenizer_json(tj: &serde_json::Value, bos: Option<u32>, eos: Option<u32>) -> Result<Vocab> {
        use serde_json::Value;
        let bad = |what: &str| Error::Tokenizer(format!("tokenizer.json: {what}"));
        let model = tj.get("model").ok_or_else(|| bad("no model"))?;
        match model.get("type").and_then(Value::as_str) {
            Some("BPE") => {}
            other => return Err(bad(&format!("model type {other:?} is not supported (BPE only)"))),
        }
        let vocab = model
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("model.vocab is not an object"))?;
        let mut entries: Vec<(u32, String, i32)> = Vec::with_capacity(vocab.len());
        for (t, id) in vocab {
            let id = id
                .as_u64()
                .filter(|&i| i < 1 << 31)
                .ok_or_else(|| bad(&format!("the id of {t:?}")))?;
            entries.push((id as u32, t.clone(), token_type::NORMAL));
        }
        let unk_name = model.get("unk_token").and_then(Value::as_str);
        for a in tj.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
            let (Some(id), Some(content)) = (
                a.get("id").and_then(Value::as_u64),
                a.get("content").and_then(Value::as_str),
            ) else {
                return Err(bad("an added token without id or content"));
            };
            if id >= 1 << 31 {
                return Err(bad(&format!("added token id {id}")));
            }
            let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
            let ty = if Some(content) == unk_name {
                token_type::UNKNOWN
            } else if special {
                token_type::CONTROL
            } else {
                token_type::USER_DEFINED
            };
            entries.retain(|e| e.0 != id as u32);
            entries.push((id as u32, content.to_string(), ty));
        }
        let n = entries.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0);
        // Ids are dense in real vocabularies; a few gaps are allowed, a sparse id space (which
        // would make us allocate for every id up to the largest) is refused.
        if n > 2 * entries.len() + 1024 {
            return Err(bad(&format!(
                "{} tokens with ids up to {}: too sparse",
                entries.len(),
                n - 1
            )));
        }
        let mut tokens = vec![Vec::new(); n];
        let mut types = vec![token_type::UNUSED; n];
        for (id, t, ty) in entries {
            tokens[id as usize] = t.into_bytes();
            types[id as usize] = ty;
        }
        let merges: Vec<String> = model
            .get("merges")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .map(|x| match x {
                        Value::String(s) => Some(s.clone()),
                        Value::Array(p) if p.len() == 2 => Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .unwrap_or(Some(Vec::new()))
            .ok_or_else(|| bad("a merge is neither \"a b\" nor [a, b]"))?;
        // Every component of the pre-tokenizer (a Sequence or one).
        let pre_tok = tj.get("pre_tokenizer").cloned().unwrap_or(Value::Null);
        let parts: Vec<&Value> = match pre_tok.get("pretokenizers").and_then(Value::as_array) {
            Some(v) => v.iter().collect(),
            None => vec![&pre_tok],
        };
        let byte_level = parts
            .iter()
            .any(|p| p.get("type").and_then(Value::as_str) == Some("ByteLevel"));
        let regex = parts
            .iter()
            .find_map(|p| p.get("pattern").and_then(|p| p.get("Regex")).and_then(Value::as_str))
            .unwrap_or("");
        // BOS from the post-processor's template.
        let post = tj.get("post_processor").cloned().unwrap_or(Value::Null);
        let posts: Vec<&Value> = match post.get("processors").and_then(Value::as_array) {
            Some(v) => v.iter().collect(),
            None => vec![&post],
        };
        let template_bos = posts.iter().find_map(|p| {
            let first = p.get("single")?.as_array()?.first()?;
            let name = first.get("SpecialToken")?.get("id")?.as_str()?;
            p.get("special_tokens")?
                .get(name)?
                .get("ids")?
                .as_array()?
                .first()?
                .as_u64()
        });
        let unk = unk_name
            .and_then(|u| tokens.iter().position(|t| t == u.as_bytes()))
            .map(|i| i as u32);
        let in_range = |x: Option<u32>| x.filter(|&i| (i as usize) < n);
        if byte_level {
            let pre = if regex.contains(r"\p{N}{1,3}") {
                PreSplit::Llama3
            } else if regex.contains(r"[^\r\n\p{L}\p{N}]?\p{L}+") {
                PreSplit::Qwen2
            } else {
                PreSplit::Gpt2
            };
            return Ok(Vocab {
                model: Model::Gpt2,
                tokens,
                scores: Vec::new(),
                types,
                merges,
                pre,
                bos: in_range(template_bos.map(|b| b as u32).or(bos)),
                eos: in_range(eos),
                unk,
                add_bos: template_bos.is_some(),
                add_space_prefix: false,
            });
        }
        // SentencePiece-style: pieces scored by merge rank.
        let ids: HashMap<&[u8], usize> = tokens.iter().enumerate().map(|(i, t)| (t.as_slice(), i)).collect();
        let mut scores = vec![f32::NEG_INFINITY; n];
        for (r, m) in merges.iter().enumerate() {
            let Some((a, b)) = m.split_once(' ') else { continue };
            if let Some(&i) = ids.get(format!("{a}{b}").as_bytes())
                && scores[i] == f32::NEG_INFINITY
            {
                scores[i] = -(r as f32);
            }
        }
        let byte_fallback = model.get("byte_fallback").and_then(Value::as_bool).unwrap_or(false);
        for (t, ty) in tokens.iter().zip(types.iter_mut()) {
            if byte_fallback && *ty == token_type::NORMAL && t.len() == 6 && t.starts_with(b"<0x") && t.ends_with(b">")
            {
                *ty = token_type::BYTE;
            }
        }
        for s in scores.iter_mut() {
            if *s == f32::NEG_INFINITY {
                *s = -1e9;
            }
        }
        let normalizer = tj.get("normalizer").map(Value::to_string).unwrap_or_default();
        let add_space_prefix = normalizer.contains("Prepend") || pre_tok.to_string().contains("Metaspace");
        Ok(Vocab {
            model: Model::Spm,
            tokens,
            scores,
            types,
            merges: Vec::new(),
            pre: PreSplit::Gpt2,
            bos: in_range(template_bos.map(|b| b as u32).or(bos)),
            eos: in_range(eos),
            unk,
            add_bos: template_bos.is_some(),
            add_space_prefix,
        })
    }
}

/// A tokenizer over a [`Vocab`]: text to token ids and back.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    to_id: HashMap<Vec<u8>, u32>,
    /// gpt2: `(left, right)` → rank.
    ranks: HashMap<(Vec<u8>, Vec<u8>), usize>,
    /// Special tokens split out of the text, longest first: `(id, is control/unknown)`.
    specials: Vec<(u32, bool)>,
    /// spm: the id of each byte's `<0xNN>` token.
    byte_tokens: [Option<u32>; 256],
}

/// GPT-2's map of bytes to printable characters (and back).
fn gpt2_byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut extra = 256u32;
    for b in 0..256u32 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap_or('?')
        } else {
            let c = char::from_u32(extra).unwrap_or('?');
            extra += 1;
            c
        };
    }
    out
}

impl Tokenizer {
    /// Builds the lookup tables of `vocab`. Refused: an empty vocabulary, more than 2^31 tokens,
    /// a gpt2 merge that is not two pieces separated by a space.
    pub fn new(vocab: Vocab) -> Result<Tokenizer> {
        if vocab.tokens.is_empty() || vocab.tokens.len() > i32::MAX as usize {
            return Err(Error::Tokenizer(format!(
                "{} tokens in the vocabulary",
                vocab.tokens.len()
            )));
        }
        let mut to_id = HashMap::with_capacity(vocab.tokens.len());
        for (i, t) in vocab.tokens.iter().enumerate() {
            to_id.insert(t.clone(), i as u32);
        }
        let mut ranks = HashMap::new();
        if vocab.model == Model::Gpt2 {
            for (r, m) in vocab.merges.iter().enumerate() {
                // the first space separates the two pieces (a piece never holds a space: it is Ġ)
                let Some((a, b)) = m.split_once(' ') else {
                    return Err(Error::Tokenizer(format!(
                        "merge {r} ('{m}') is not two pieces separated by a space"
                    )));
                };
                ranks.entry((a.as_bytes().to_vec(), b.as_bytes().to_vec())).or_insert(r);
            }
        }
        let ty = |i: usize| vocab.types.get(i).copied().unwrap_or(token_type::NORMAL);
        let mut specials: Vec<(u32, bool)> = (0..vocab.tokens.len())
            .filter(|&i| {
                matches!(
                    ty(i),
                    token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN
                )
            })
            .filter(|&i| !vocab.tokens[i].is_empty())
            .map(|i| (i as u32, ty(i) != token_type::USER_DEFINED || is_eog_text(&vocab.tokens[i])))
            .collect();
        specials.sort_by_key(|&(i, _)| std::cmp::Reverse(vocab.tokens[i as usize].len()));
        let mut byte_tokens = [None; 256];
        if vocab.model == Model::Spm {
            for (b, slot) in byte_tokens.iter_mut().enumerate() {
                *slot = to_id
                    .get(format!("<0x{b:02X}>").as_bytes())
                    .or_else(|| to_id.get(&[b as u8][..]))
                    .copied();
            }
        }
        Ok(Tokenizer {
            vocab,
            to_id,
            ranks,
            specials,
            byte_tokens,
        })
    }

    /// Reads the vocabulary a GGUF embeds and builds its tokenizer ([`Vocab::from_catalog`]).
    pub fn from_catalog(catalog: &Catalog) -> Result<Tokenizer> {
        Tokenizer::new(Vocab::from_catalog(catalog)?)
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// Whether the vocabulary is empty (never, for a built tokenizer).
    pub fn is_empty(&self) -> bool {
        self.vocab.tokens.is_empty()
    }

    /// The id of a token's exact text, if it is in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.to_id.get(text.as_bytes()).copied()
    }

    /// The texts of the control tokens (`<s>`, `</s>`, `<|im_end|>`, ...): the ones
    /// [`encode_special`](Self::encode_special) parses only when asked.
    pub fn control_texts(&self) -> impl Iterator<Item = &str> + '_ {
        self.specials
            .iter()
            .filter(|&&(_, control)| control)
            .filter_map(|&(id, _)| std::str::from_utf8(&self.vocab.tokens[id as usize]).ok())
    }

    /// Whether `id` ends generation (EOS, or a control token named like an end-of-turn).
    pub fn is_eog(&self, id: u32) -> bool {
        if Some(id) == self.vocab.eos {
            return true;
        }
        let ty = self.vocab.types.get(id as usize).copied().unwrap_or(token_type::NORMAL);
        let text = self.vocab.tokens.get(id as usize).map(Vec::as_slice);
        (ty == token_type::CONTROL
            && matches!(
                text,
                Some(b"<|eot_id|>" | b"<|im_end|>" | b"<|end|>" | b"<end_of_turn>" | b"<|endoftext|>")
            ))
            // a user-defined token with such a text: llama.cpp makes it control and end-of-generation
            || (ty == token_type::USER_DEFINED && text.is_some_and(is_eog_text))
    }

    /// Tokenizes `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special =
    /// false)`: BOS first when `add_bos` and the vocabulary adds one; control tokens written in
    /// the text are plain text.
    pub fn encode(&self, text: &str, add_bos: bool) -> Vec<u32> {
        self.encode_special(text, add_bos, false)
    }

    /// [`encode`](Self::encode), with control tokens written in the text (`<s>`,
    /// `<|im_start|>`, ...) parsed as those tokens when `parse_special`.
    pub fn encode_special(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        if parse_special {
            self.encode_parsing(text, add_bos, Some(&|_, _| true))
        } else {
            self.encode_parsing(text, add_bos, None)
        }
    }

    /// [`encode_special`](Self::encode_special) parsing control tokens, except a control token's
    /// text that spans one of `breaks` (byte offsets into `text`, a break strictly inside the
    /// match): that stays plain text. A chat prompt marks where each message's text begins and
    /// ends, and every control token's text inside it, so that the template's own markup is
    /// parsed as tokens while what a client wrote never is (`</s>` in a message is text, not EOS).
    pub fn encode_special_except(&self, text: &str, add_bos: bool, breaks: &[usize]) -> Vec<u32> {
        let mut breaks = breaks.to_vec();
        breaks.sort_unstable();
        self.encode_parsing(
            text,
            add_bos,
            Some(&|start, end| {
                // The first break after `start` decides.
                let i = breaks.partition_point(|&b| b <= start);
                breaks.get(i).is_none_or(|&b| b >= end)
            }),
        )
    }

    /// Tokenizes `text`, a control token's text at `[start, end)` parsed as that token when
    /// `parse(start, end)` (never without `parse`); user-defined tokens are always split out (as
    /// llama.cpp does).
    fn encode_parsing(&self, text: &str, add_bos: bool, parse: Option<&dyn Fn(usize, usize) -> bool>) -> Vec<u32> {
        // Fragments: Ok((offset, text)) to tokenize, Err(id) for a special token found in the
        // text. (llama.cpp: empty text is no fragment at all, so not even the space prefix.)
        type Frag<'a> = std::result::Result<(usize, &'a str), u32>;
        let mut frags: Vec<Frag<'_>> = if text.is_empty() {
            Vec::new()
        } else {
            vec![Ok((0, text))]
        };
        for &(id, control) in &self.specials {
            if control && parse.is_none() {
                continue;
            }
            let Ok(pat) = std::str::from_utf8(&self.vocab.tokens[id as usize]) else {
                continue;
            };
            let mut next = Vec::with_capacity(frags.len());
            for f in frags {
                match f {
                    Ok((base, s)) => {
                        // `s[from..]` is left to search, `s[kept..]` not yet handed on.
                        let (mut from, mut kept) = (0, 0);
                        while let Some(rel) = s[from..].find(pat) {
                            let at = from + rel;
                            if control && parse.is_some_and(|p| !p(base + at, base + at + pat.len())) {
                                // Plain text here: search on from the next character.
                                from = at + s[at..].chars().next().map_or(1, char::len_utf8);
                                continue;
                            }
                            if at > kept {
                                next.push(Ok((base + kept, &s[kept..at])));
                            }
                            next.push(Err(id));
                            kept = at + pat.len();
                            from = kept;
                        }
                        if kept < s.len() {
                            next.push(Ok((base + kept, &s[kept..])));
                        }
                    }
                    special => next.push(special),
                }
            }
            frags = next;
        }
        let mut out = Vec::new();
        if add_bos
            && self.vocab.add_bos
            && let Some(b) = self.vocab.bos
        {
            out.push(b);
        }
        let mut prev_special = true;
        for f in frags {
            match f {
                Ok((_, s)) => {
                    match self.vocab.model {
                        Model::Spm => {
                            let mut t = String::with_capacity(s.len() + 3);
                            if self.vocab.add_space_prefix && prev_special {
                                t.push(' ');
                            }
                            t.push_str(s);
                            self.spm(&t.replace(' ', "\u{2581}"), &mut out);
                        }
                        Model::Gpt2 => {
                            for word in pre_split(s, self.vocab.pre) {
                                self.bpe(word, &mut out);
                            }
                        }
                    }
                    prev_special = false;
                }
                Err(id) => {
                    out.push(id);
                    prev_special = true;
                }
            }
        }
        out
    }

    /// SentencePiece BPE over one fragment (spaces already `▁`), as llama.cpp's
    /// `llm_tokenizer_spm_session`.
    fn spm(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        struct Sym {
            start: usize,
            len: usize,
            prev: Option<usize>,
            next: Option<usize>,
        }
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut syms: Vec<Sym> = chars
            .iter()
            .enumerate()
            .map(|(i, &(start, c))| Sym {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (i + 1 < chars.len()).then_some(i + 1),
            })
            .collect();
        #[derive(PartialEq)]
        struct Bigram {
            score: f32,
            left: usize,
            right: usize,
            size: usize,
        }
        impl Eq for Bigram {}
        impl Ord for Bigram {
            fn cmp(&self, o: &Self) -> Ordering {
                // highest score first; on a tie, the leftmost
                self.score
                    .partial_cmp(&o.score)
                    .unwrap_or(Ordering::Equal)
                    .then(o.left.cmp(&self.left))
            }
        }
        impl PartialOrd for Bigram {
            fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
                Some(self.cmp(o))
            }
        }
        let bytes = text.as_bytes();
        let mut heap = BinaryHeap::new();
        let try_add = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let piece = &bytes[syms[l].start..syms[l].start + syms[l].len + syms[r].len];
            if let Some(&id) = self.to_id.get(piece) {
                heap.push(Bigram {
                    score: self.vocab.scores.get(id as usize).copied().unwrap_or(0.0),
                    left: l,
                    right: r,
                    size: piece.len(),
                });
            }
        };
        for i in 1..syms.len() {
            try_add(&mut heap, &syms, Some(i - 1), Some(i));
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (b.left, b.right);
            if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != b.size {
                continue;
            }
            syms[l].len += syms[r].len;
            syms[r].len = 0;
            syms[l].next = syms[r].next;
            if let Some(n) = syms[r].next {
                syms[n].prev = Some(l);
            }
            try_add(&mut heap, &syms, syms[l].prev, Some(l));
            try_add(&mut heap, &syms, Some(l), syms[l].next);
        }
        let mut i = Some(0);
        while let Some(k) = i {
            let s = &syms[k];
            let piece = &bytes[s.start..s.start + s.len];
            match self.to_id.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece {
                        if let Some(id) = self.byte_tokens[b as usize].or(self.vocab.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            i = s.next;
        }
    }

    /// Byte-level BPE over one pre-split word, as llama.cpp's `llm_tokenizer_bpe_session`.
    fn bpe(&self, word: &str, out: &mut Vec<u32>) {
        let map = gpt2_byte_chars();
        let mapped: String = word.bytes().map(|b| map[b as usize]).collect();
        if self.vocab.pre == PreSplit::Llama3
            && let Some(&id) = self.to_id.get(mapped.as_bytes())
        {
            // Llama 3 vocabularies ignore merges for a word that is a token (llama.cpp's
            // `ignore_merges`).
            out.push(id);
            return;
        }
        let mut parts: Vec<&str> = mapped
            .char_indices()
            .map(|(i, c)| &mapped[i..i + c.len_utf8()])
            .collect();
        // Repeatedly merge the pair of lowest rank (leftmost on a tie).
        loop {
            let mut best: Option<(usize, usize)> = None;
            for i in 0..parts.len().saturating_sub(1) {
                if let Some(&r) = self
                    .ranks
                    .get(&(parts[i].as_bytes().to_vec(), parts[i + 1].as_bytes().to_vec()))
                    && best.is_none_or(|(br, _)| r < br)
                {
                    best = Some((r, i));
                }
            }
            let Some((_, i)) = best else { break };
            let start = parts[i].as_ptr() as usize - mapped.as_ptr() as usize;
            let end = start + parts[i].len() + parts[i + 1].len();
            parts[i] = &mapped[start..end];
            parts.remove(i + 1);
        }
        for p in parts {
            match self.to_id.get(p.as_bytes()) {
                Some(&id) => out.push(id),
                None => {
                    // llama.cpp: each character's token, if it has one
                    for (i, c) in p.char_indices() {
                        if let Some(&id) = self.to_id.get(&p.as_bytes()[i..i + c.len_utf8()]) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }

    /// The bytes a token stands for in text: its piece with `▁` as a space (SentencePiece), the
    /// byte of a byte token, GPT-2 characters mapped back to bytes; nothing for control tokens
    /// and ids outside the vocabulary.
    pub fn piece(&self, id: u32) -> Vec<u8> {
        let Some(t) = self.vocab.tokens.get(id as usize) else {
            return Vec::new();
        };
        let ty = self.vocab.types.get(id as usize).copied().unwrap_or(token_type::NORMAL);
        if ty == token_type::USER_DEFINED && is_eog_text(t) {
            // control for llama.cpp (is_eog_text)
            return Vec::new();
        }
        match ty {
            token_type::CONTROL | token_type::UNKNOWN | token_type::UNUSED => return Vec::new(),
            token_type::USER_DEFINED => return t.clone(),
            _ => {}
        }
        match self.vocab.model {
            Model::Spm => {
                if ty == token_type::BYTE
                    && t.len() == 6
                    && t.starts_with(b"<0x")
                    && let Ok(s) = std::str::from_utf8(&t[3..5])
                    && let Ok(b) = u8::from_str_radix(s, 16)
                {
                    return vec![b];
                }
                String::from_utf8_lossy(t).replace('\u{2581}', " ").into_bytes()
            }
            Model::Gpt2 => {
                let map = gpt2_byte_chars();
                String::from_utf8_lossy(t)
                    .chars()
                    .map(|c| map.iter().position(|&m| m == c).map_or(b'?', |b| b as u8))
                    .collect()
            }
        }
    }

    /// The text of `ids` (invalid UTF-8 replaced), without the space SentencePiece put before
    /// the text.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.piece(id));
        }
        let mut s = String::from_utf8_lossy(&bytes).into_owned();
        if self.vocab.model == Model::Spm && self.vocab.add_space_prefix && s.starts_with(' ') {
            s.remove(0);
        }
        s
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Number
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// The length of a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at the start of
/// `s`, matched case-insensitively when `ci`.
fn contraction(s: &str, ci: bool) -> usize {
    let b = s.as_bytes();
    if b.first() != Some(&b'\'') {
        return 0;
    }
    let low = |i: usize| b.get(i).map(|c| if ci { c.to_ascii_lowercase() } else { *c });
    match (low(1), low(2)) {
        (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => 3,
        (Some(b's' | b't' | b'm' | b'd'), _) => 2,
        _ => 0,
    }
}

/// Splits text into the words a byte-level BPE tokenizes separately (the regex of `pre`,
/// hand-written: `\p{L}` is `char::is_alphabetic`, `\p{N}` is `char::is_numeric`).
fn pre_split(text: &str, pre: PreSplit) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    let chars = |from: usize| text[from..].chars();
    while i < text.len() {
        let rest = &text[i..];
        let c = rest.chars().next().unwrap_or(' ');
        let take = |pred: &dyn Fn(char) -> bool, from: usize, max: usize| -> usize {
            let mut end = from;
            for (n, ch) in chars(from).enumerate() {
                if n >= max || !pred(ch) {
                    break;
                }
                end += ch.len_utf8();
            }
            end
        };
        let end = match pre {
            PreSplit::Gpt2 => {
                let k = contraction(rest, false);
                let after_space = if c == ' ' { i + 1 } else { i };
                let c2 = text[after_space..].chars().next();
                if k > 0 {
                    i + k
                } else if let Some(c2) = c2.filter(|&c2| class(c2) != Class::Space) {
                    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
                    let cl = class(c2);
                    take(&|ch| class(ch) == cl, after_space, usize::MAX)
                } else {
                    whitespace_run(text, i)
                }
            }
            PreSplit::Llama3 | PreSplit::Qwen2 => {
                let k = contraction(rest, true);
                let max_digits = if pre == PreSplit::Llama3 { 3 } else { 1 };
                let next_is_letter = chars(i + c.len_utf8())
                    .next()
                    .is_some_and(|n| class(n) == Class::Letter);
                let after_space = if c == ' ' { i + 1 } else { i };
                let c2 = text[after_space..].chars().next();
                if k > 0 {
                    i + k
                } else if class(c) == Class::Letter {
                    // `\p{L}+`
                    take(&|ch| class(ch) == Class::Letter, i, usize::MAX)
                } else if c != '\r' && c != '\n' && class(c) != Class::Number && next_is_letter {
                    // `[^\r\n\p{L}\p{N}]\p{L}+`
                    take(&|ch| class(ch) == Class::Letter, i + c.len_utf8(), usize::MAX)
                } else if class(c) == Class::Number {
                    // `\p{N}{1,3}` (Qwen2: `\p{N}`)
                    take(&|ch| class(ch) == Class::Number, i, max_digits)
                } else if c2.is_some_and(|c2| class(c2) == Class::Other) {
                    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
                    let e = take(&|ch| class(ch) == Class::Other, after_space, usize::MAX);
                    take(&|ch| ch == '\r' || ch == '\n', e, usize::MAX)
                } else {
                    // `\s*[\r\n]+`, else `\s+(?!\S)|\s+`
                    let ws_end = take(&|ch| ch.is_whitespace(), i, usize::MAX);
                    match text[i..ws_end].rfind(['\r', '\n']) {
                        Some(nl) => i + nl + 1,
                        None => whitespace_run(text, i),
                    }
                }
            }
        };
        let end = end.max(i + c.len_utf8());
        out.push(&text[i..end]);
        i = end;
    }
    out
}

/// `\s+(?!\S)|\s+` at `i` (a whitespace character): the run, less its last character when a
/// non-space follows and the run is longer than one.
fn whitespace_run(text: &str, i: usize) -> usize {
    let mut end = i;
    let mut last = i;
    for ch in text[i..].chars() {
        if !ch.is_whitespace() {
            break;
        }
        last = end;
        end += ch.len_utf8();
    }
    if end < text.len() && last > i { last } else { end }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_tokens_over_a_break_stay_text() {
        // <unk>, <s>, </s> (control), then pieces
        let pieces = ["<unk>", "<s>", "</s>", "▁", "h", "i", "<", "/", "s", ">", "▁h", "▁hi"];
        let types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1];
        let scores = [
            0.0, 0.0, 0.0, -10.0, -11.0, -12.0, -13.0, -14.0, -15.0, -16.0, -1.0, -2.0,
        ];
        let tok = Tokenizer::new(Vocab::spm(
            pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            scores.to_vec(),
            types.to_vec(),
        ))
        .unwrap();
        assert_eq!(tok.control_texts().collect::<Vec<_>>(), ["<unk>", "</s>", "<s>"]);
        let text = "hi</s>hi</s>";
        let parsed = tok.encode_special(text, false, true);
        assert_eq!(parsed, [11, 2, 11, 2]);
        // no break: as encode_special; a break at a match's edge does not stop it
        assert_eq!(tok.encode_special_except(text, false, &[]), parsed);
        assert_eq!(tok.encode_special_except(text, false, &[2, 6, 12]), parsed);
        // a break inside the first </s>: text there, the second still parsed
        let ids = tok.encode_special_except(text, false, &[3]);
        assert!(!ids[..ids.len() - 1].contains(&2), "{ids:?}");
        assert_eq!(ids.last(), Some(&2));
        assert_eq!(
            ids,
            tok.encode_special("hi</s>hi", false, false)
                .into_iter()
                .chain([2])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn gpt2_pre_split() {
        assert_eq!(
            pre_split("Hello world's  123 !!x\n\n", PreSplit::Gpt2),
            vec!["Hello", " world", "'s", " ", " 123", " !!", "x", "\n\n"]
        );
        assert_eq!(
            pre_split("Hello WORLD'S 12345 ,x\n\n y", PreSplit::Llama3),
            vec!["Hello", " WORLD", "'S", " ", "123", "45", " ,", "x", "\n\n", " y"]
        );
    }
}

/// Whether a token's text is one llama.cpp v0.4.0's vocabulary loader (`llama-vocab.cpp`)
/// takes as end-of-generation whatever the file says its type is, and then makes a control
/// token when it is not one: Gemma 3's vocabulary declares `</s>` user-defined, which llama.cpp
/// then neither parses in plain text nor prints.
fn is_eog_text(t: &[u8]) -> bool {
    const EOG: &[&str] = &[
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    ];
    EOG.iter().any(|e| e.as_bytes() == t)
}
