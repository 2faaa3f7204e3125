//! Constrained decoding: a JSON schema, "any JSON object" or a Lark grammar turned into a mask of
//! the tokens that may come next, so that what a model writes always parses.
//!
//! The grammar engine is [`llguidance`] (what llama.cpp links for JSON schemas): a [`Grammars`]
//! holds the token trie of one vocabulary (built once per model, a few milliseconds), each
//! [`Constraint`] is the state of one sequence. A [`Sampler`](crate::Sampler) that carries a
//! constraint ([`Sampler::constrained`](crate::Sampler::constrained)) sets the logits of every
//! token the grammar does not allow to −∞ before it picks, and tells the grammar what it picked;
//! when the grammar is complete it picks the end-of-sequence token, so a sequence ends the way an
//! unconstrained one does. The mask is computed on the thread that samples, one sequence after
//! another (llguidance takes ~0.1–1 ms per token for a JSON schema over a 50k–150k vocabulary).
//!
//! JSON is constrained compact: no whitespace between tokens (`{"a":1}`), so that a model cannot
//! spend its tokens on blank lines; strings, numbers, enums, arrays and nested objects follow the
//! schema (`minItems`, `maxLength`, `minimum` … as llguidance supports them; an unsupported
//! keyword is an error naming it, never ignored).
//!
//! ```no_run
//! # fn demo(session: &mut tensorlane_llm::Session<'_>) -> tensorlane_llm::Result<()> {
//! use tensorlane_llm::{Sampling, grammar::Grammars};
//!
//! let grammars = Grammars::new(session.tokenizer())?;
//! let schema = serde_json::json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
//! let sampler = Sampling::default().sampler().constrained(grammars.json_schema(&schema)?);
//! let prompt = session.tokenizer().encode("Answer in JSON:", true);
//! for token in session.generate(&prompt, &Sampling::default()).with_sampler(sampler) {
//!     print!("{}", String::from_utf8_lossy(&token?.piece));
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;

use llguidance::api::{GrammarInit, TopLevelGrammar};
use llguidance::toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::ParserFactory;

use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A vocabulary as llguidance sees it: the trie of every token's bytes (control tokens marked
/// special so that no text can produce them).
struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        // Longest match in the trie: the bytes a grammar forces are a continuation of text
        // already written, where the model's own tokenizer would add SentencePiece's leading
        // space (and no merge context exists anyway).
        self.trie.greedy_tokenize(s)
    }
}

/// The grammar engine for one vocabulary: makes a [`Constraint`] per sequence. Cheap to clone
/// (the trie is shared).
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .finish()
    }
}

/// The bytes the trie keys token `id` by: its text, or for a control (or unknown) token the
/// special-token marker and its name, which no generated text matches.
fn trie_word(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let piece = tokenizer.piece(id);
    if !piece.is_empty() {
        return piece;
    }
    let name = tokenizer.vocab().tokens.get(id as usize).cloned().unwrap_or_default();
    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    if name.is_empty() {
        w.extend(format!("<[{id}]>").bytes());
    } else {
        w.extend(name);
    }
    w
}

impl Grammars {
    /// The engine for `tokenizer`'s vocabulary. Its end-of-sequence token ends a constrained
    /// sequence (every end-of-generation token is accepted where the grammar is complete). An
    /// error when the vocabulary has no end-of-sequence token.
    pub fn new(tokenizer: &Tokenizer) -> Result<Grammars> {
        let n = tokenizer.len();
        let eos = tokenizer.vocab().eos.ok_or_else(|| {
            Error::Tokenizer(
                "the vocabulary has no end-of-sequence token (tokenizer.ggml.eos_token_id), so a \
                 constrained sequence could never end"
                    .into(),
            )
        })?;
        let words: Vec<Vec<u8>> = (0..n as u32).map(|id| trie_word(tokenizer, id)).collect();
        let eogs: Vec<u32> = (0..n as u32).filter(|&id| tokenizer.is_eog(id)).collect();
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eogs);
        let env: TokEnv = Arc::new(Env { trie });
        // No fast-forwarded or backtracked tokens: the executors append one sampled token a step.
        let caps = InferenceCapabilities {
            ff_tokens: false,
            backtrack: false,
            conditional_ff_tokens: false,
            fork: false,
        };
        let mut factory = ParserFactory::new(&env, caps, &llguidance::earley::SlicedBiasComputer::general_slices())
            .map_err(|e| Error::Options(format!("the grammar engine cannot index this vocabulary: {e}")))?;
        factory.quiet();
        Ok(Grammars {
            factory: Arc::new(factory),
        })
    }

    fn constraint(&self, what: &str, grammar: TopLevelGrammar) -> Result<Constraint> {
        let parser = self
            .factory
            .create_parser_from_init_default(GrammarInit::Serialized(grammar))
            .map_err(|e| Error::Options(format!("{what}: {e}")))?;
        Ok(Constraint {
            inner: llguidance::Constraint::new(parser),
            eos: self.factory.tok_env().tok_trie().eos_token(),
        })
    }

    /// Output that is a JSON value valid under `schema` (JSON Schema, as OpenAI's
    /// `response_format: {"type": "json_schema"}` carries it), written compact. An error naming
    /// what llguidance cannot compile (an unsupported keyword, a bad `$ref`).
    ///
    /// As llama.cpp's schema converter does, an object schema that lists `properties` and says
    /// nothing of `additionalProperties` allows no other keys ([`close_objects`]): a model is
    /// held to the keys the schema names instead of inventing more.
    pub fn json_schema(&self, schema: &serde_json::Value) -> Result<Constraint> {
        let mut schema = schema.clone();
        close_objects(&mut schema);
        if let Some(obj) = schema.as_object_mut() {
            obj.entry("x-guidance")
                .or_insert_with(|| serde_json::json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"}));
        } else if !schema.is_boolean() {
            return Err(Error::Options(format!(
                "a JSON schema is an object (or true/false); got {}",
                crate::grammar::kind(&schema)
            )));
        }
        self.constraint("the JSON schema", TopLevelGrammar::from_json_schema(schema))
    }

    /// Output that is one JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    pub fn json_object(&self) -> Result<Constraint> {
        self.json_schema(&serde_json::json!({"type": "object"}))
    }

    /// Output in the language of a Lark grammar (llguidance's dialect: `start: ...`, `%json {...}`
    /// for a JSON schema inside it, `<[id]>` or `<|name|>` for special tokens). An error with the
    /// line the grammar is wrong at.
    pub fn lark(&self, grammar: &str) -> Result<Constraint> {
        self.constraint("the grammar", TopLevelGrammar::from_lark(grammar.to_string()))
    }
}

/// Gives every object schema inside `schema` that lists `properties` but says nothing of
/// `additionalProperties` (or `patternProperties`) `"additionalProperties": false`: llama.cpp's
/// default (its grammar README: "additionalProperties defaults to false"), and what OpenAI's
/// strict mode asks a schema to say. A plain `{"type": "object"}` stays any object. Walks the
/// places a JSON Schema holds schemas (`properties`, `items`, `prefixItems`, `anyOf`/`oneOf`/
/// `allOf`, `not`, `$defs`/`definitions`, `additionalProperties`, `if`/`then`/`else`), so a
/// property that happens to be named `properties` is not mistaken for a keyword.
pub fn close_objects(schema: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(obj) = schema else { return };
    if obj.get("properties").is_some_and(Value::is_object)
        && !obj.contains_key("additionalProperties")
        && !obj.contains_key("patternProperties")
    {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, v) in obj.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                if let Value::Object(map) = v {
                    map.values_mut().for_each(close_objects);
                }
            }
            "items" | "prefixItems" | "anyOf" | "oneOf" | "allOf" => match v {
                Value::Array(list) => list.iter_mut().for_each(close_objects),
                other => close_objects(other),
            },
            "not" | "additionalProperties" | "additionalItems" | "contains" | "if" | "then" | "else" => {
                close_objects(v)
            }
            _ => {}
        }
    }
}

/// The JSON type of `v`, for messages.
pub(crate) fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// One sequence's place in a grammar: which tokens may come next.
pub struct Constraint {
    inner: llguidance::Constraint,
    eos: u32,
}

impl Clone for Constraint {
    fn clone(&self) -> Constraint {
        Constraint {
            inner: self.inner.deep_clone(),
            eos: self.eos,
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("eos", &self.eos).finish_non_exhaustive()
    }
}

/// What the grammar allows at the next step.
pub(crate) enum Allowed {
    /// Only tokens whose `mask` entry is true.
    Mask(Vec<bool>),
    /// The grammar is complete: the sequence ends with this end-of-sequence token.
    End(u32),
}

impl Constraint {
    /// The tokens allowed next (`n_vocab` entries; ids past the trie are not allowed).
    pub(crate) fn allowed(&mut self, n_vocab: usize) -> Result<Allowed> {
        let res = self.inner.compute_mask().map_err(grammar_error)?;
        if res.is_stop() {
            return Ok(Allowed::End(self.eos));
        }
        let Some(mask) = res.sample_mask.as_ref() else {
            return Err(Error::Options("the grammar engine gave no mask and no stop".into()));
        };
        let allowed: Vec<bool> = (0..n_vocab as u32).map(|id| mask.is_allowed(id)).collect();
        if !allowed.iter().any(|&a| a) {
            return Err(Error::Options(
                "the grammar allows no token of this vocabulary here (a literal the tokenizer cannot write?)".into(),
            ));
        }
        Ok(Allowed::Mask(allowed))
    }

    /// Records the token the sampler picked from the last [`allowed`](Self::allowed) mask.
    pub(crate) fn commit(&mut self, id: u32) -> Result<()> {
        self.inner.commit_token(Some(id)).map(|_| ()).map_err(grammar_error)
    }
}

fn grammar_error(e: impl std::fmt::Display) -> Error {
    Error::Options(format!("constrained decoding failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::close_objects;
    use serde_json::json;

    #[test]
    fn objects_with_properties_are_closed_where_the_schema_is_silent() {
        let mut s = json!({
            "type": "object",
            "properties": {
                // a property named like the keyword: its schema is closed, the name map is not
                "properties": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "open": {"type": "object", "properties": {"y": {}}, "additionalProperties": true},
                "any": {"type": "object"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"z": {}}}}
            },
            "anyOf": [{"properties": {"w": {}}}],
            "$defs": {"d": {"type": "object", "properties": {"v": {}}}}
        });
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"].get("additionalProperties"), None, "the name map is not a schema");
        assert_eq!(s["properties"]["properties"]["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["open"]["additionalProperties"], json!(true), "what a schema says stays");
        assert_eq!(s["properties"]["any"].get("additionalProperties"), None, "a bare object stays any object");
        assert_eq!(s["properties"]["list"]["items"]["additionalProperties"], json!(false));
        assert_eq!(s["anyOf"][0]["additionalProperties"], json!(false));
        assert_eq!(s["$defs"]["d"]["additionalProperties"], json!(false));
    }
}
