//! A conversation through the model's own chat template: the messages rendered with minijinja
//! (the Python string methods Hugging Face templates call included) and tokenized with the
//! special tokens the template writes parsed as tokens, and none in the messages' text
//! ([`crate::openai::mark_text`], [`crate::openai::chat_prompt`]): a user who types `</s>` or
//! `<|im_end|>` gets those characters, not a control token. What `tensorlane run --chat` and
//! `POST /v1/chat/completions` share.

use serde_json::{Value, json};

use crate::openai::{chat_prompt, mark_text};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// `source` compiled as the template `chat`, with the functions Hugging Face templates call
/// (`raise_exception`, `strftime_now`), or why it does not compile.
pub fn environment(source: String) -> std::result::Result<minijinja::Environment<'static>, String> {
    let mut env = minijinja::Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_function("strftime_now", |fmt: String| {
        let _ = fmt;
        // No clock formatting here: templates use it for a "today" line only.
        String::from("01 Jan 2026")
    });
    env.add_template_owned("chat", source)
        .map(|()| env)
        .map_err(|e| format!("the model's chat template does not compile: {e}"))
}

/// Renders `messages` (`{"role", "content"}` objects whose content [`mark_text`] has marked)
/// with the template of `env`, the vocabulary's BOS and EOS texts as `bos_token`/`eos_token`.
pub fn render(
    env: &minijinja::Environment<'static>,
    tok: &Tokenizer,
    messages: &[Value],
    add_generation_prompt: bool,
) -> std::result::Result<String, String> {
    render_with_tools(env, tok, messages, None, add_generation_prompt)
}

/// [`render`], with the template's `tools` variable set to `tools` (OpenAI's list of
/// `{"type": "function", "function": {...}}`) when given.
pub fn render_with_tools(
    env: &minijinja::Environment<'static>,
    tok: &Tokenizer,
    messages: &[Value],
    tools: Option<&Value>,
    add_generation_prompt: bool,
) -> std::result::Result<String, String> {
    let vocab = tok.vocab();
    let text_of = |id: Option<u32>| {
        id.and_then(|i| vocab.tokens.get(i as usize))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    env.get_template("chat")
        .and_then(|t| {
            let base = minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => text_of(vocab.bos),
                eos_token => text_of(vocab.eos),
            };
            match tools {
                Some(tools) => t.render(minijinja::context! { tools => tools, ..base }),
                None => t.render(base),
            }
        })
        .map_err(|e| format!("the chat template failed on these messages: {e}"))
}

/// A conversation with a model: its template and the messages so far.
pub struct Chat {
    env: minijinja::Environment<'static>,
    messages: Vec<Value>,
}

impl std::fmt::Debug for Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
    }
}

impl Chat {
    /// A conversation over the chat template `source` (Jinja, as a GGUF's
    /// `tokenizer.chat_template` or `tokenizer_config.json` holds it). A template that does not
    /// compile is an [`Error::Metadata`] naming it.
    pub fn new(source: String) -> Result<Chat> {
        let env = environment(source).map_err(|message| Error::Metadata {
            key: "tokenizer.chat_template".into(),
            message,
        })?;
        Ok(Chat {
            env,
            messages: Vec::new(),
        })
    }

    /// A conversation over `model`'s own template ([`crate::openai::chat_template`]); a model
    /// without one is an [`Error::Metadata`] that says so.
    pub fn for_model(model: &tensorlane::model::Model) -> Result<Chat> {
        let source = crate::openai::chat_template(model).ok_or_else(|| Error::Metadata {
            key: "tokenizer.chat_template".into(),
            message: "this model has no chat template (neither the GGUF key nor tokenizer_config.json beside \
                      the file): give the prompt as plain text without --chat"
                .into(),
        })?;
        Chat::new(source)
    }

    /// Adds a message (`system`, `user`, `assistant`, ...); its text is kept text (no control
    /// token is parsed in it).
    pub fn push(&mut self, role: &str, content: &str, tok: &Tokenizer) {
        self.messages
            .push(json!({"role": role, "content": mark_text(tok, content)}));
    }

    /// A copy of the messages so far (for [`Chat::set_messages`]).
    pub fn clone_messages(&self) -> Vec<Value> {
        self.messages.clone()
    }

    /// Replaces the messages (with ones [`Chat::clone_messages`] gave: their text is marked).
    pub fn set_messages(&mut self, messages: Vec<Value>) {
        self.messages = messages;
    }

    /// The number of messages so far.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there is no message yet.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The conversation's prompt tokens, ending where the assistant's reply starts
    /// (`add_generation_prompt`); BOS as the template and vocabulary say.
    pub fn prompt(&self, tok: &Tokenizer) -> Result<Vec<u32>> {
        let rendered = render(&self.env, tok, &self.messages, true).map_err(Error::Options)?;
        Ok(chat_prompt(tok, &rendered))
    }

    /// The conversation rendered as text, ending where the assistant's reply starts (the marks
    /// that keep the messages' text apart taken out): what [`Chat::prompt`] tokenizes.
    pub fn rendered(&self, tok: &Tokenizer) -> Result<String> {
        let r = render(&self.env, tok, &self.messages, true).map_err(Error::Options)?;
        Ok(r.replace(crate::openai::MARK, ""))
    }
}
