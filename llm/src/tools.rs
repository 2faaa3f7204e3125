//! Tool calls for the chat route: OpenAI's `tools` and `tool_choice` rendered through the model's
//! own chat template (the `tools` variable), the model's reply parsed back into `tool_calls` in
//! the format its family was trained on, and — for `tool_choice` `"required"` or a named
//! function — the reply constrained by a grammar ([`crate::grammar`]) so that it is always a
//! valid call of a declared function with arguments that follow its JSON schema.
//!
//! | format | template mentions | the model writes |
//! |---|---|---|
//! | Hermes (Qwen 2.5/3, Hermes, SmolLM3) | `<tool_call>` | `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` (one or more) |
//! | Mistral | `[TOOL_CALLS]` | `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` |
//! | Llama 3.x | `<\|python_tag\|>` or `ipython` | `{"name": …, "parameters": {…}}` |
//!
//! A template that does not read `tools`, or reads it in none of these formats, is refused (400)
//! rather than given tools it would drop.

use serde_json::{Value, json};

use crate::grammar::{Constraint, Grammars};
use crate::tokenizer::Tokenizer;

/// How a family writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>{json}</tool_call>` blocks, `arguments`.
    Hermes,
    /// `[TOOL_CALLS]` and a JSON list of calls, `arguments`.
    Mistral,
    /// A bare JSON object, `parameters` (Llama 3.1/3.2's JSON tool calling).
    Llama3,
}

impl Format {
    /// The format a chat template's source uses, if it reads `tools` in one this module knows.
    pub fn of_template(source: &str) -> Option<Format> {
        if !source.contains("tools") {
            return None;
        }
        if source.contains("<tool_call>") {
            Some(Format::Hermes)
        } else if source.contains("[TOOL_CALLS]") {
            Some(Format::Mistral)
        } else if source.contains("<|python_tag|>") || source.contains("ipython") {
            Some(Format::Llama3)
        } else {
            None
        }
    }

    /// The key of a call's arguments.
    fn arguments_key(self) -> &'static str {
        match self {
            Format::Llama3 => "parameters",
            _ => "arguments",
        }
    }
}

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The model decides (the reply is parsed; prose stays prose).
    Auto,
    /// No tool call: the tools are not given to the template.
    None,
    /// A call of one of the tools (constrained).
    Required,
    /// A call of this function (constrained).
    Named(String),
}

/// The tools of one request.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The format of the model's template.
    pub format: Format,
    /// The declared functions: name and the JSON schema of its arguments.
    pub functions: Vec<(String, Value)>,
    /// `tool_choice`.
    pub choice: Choice,
    /// The `tools` list as the client sent it, for the template.
    pub declared: Value,
}

/// A request error: the message and the parameter it is about.
pub type Refusal = (String, &'static str);

fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Tools {
    /// The tools of a request's `tools` and `tool_choice`, for a model whose chat template is
    /// `template`; `None` when there are none (or `tool_choice` is `"none"`... the template is
    /// then rendered without them).
    pub fn from_request(tools: Option<&Value>, choice: Option<&Value>, template: Option<&str>) -> Result<Option<Tools>, Refusal> {
        let list = match tools {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => &a[..],
            Some(_) => return Err(("tools must be a list of {\"type\": \"function\", \"function\": {...}}".into(), "tools")),
        };
        if list.len() > 128 {
            return Err(("at most 128 tools".into(), "tools"));
        }
        let mut functions = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let f = t.get("function").filter(|_| t.get("type").and_then(Value::as_str) == Some("function"));
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            let (Some(f), Some(name)) = (f, name) else {
                return Err((format!("tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}"), "tools"));
            };
            if !is_name(name) {
                return Err((format!("tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-'"), "tools"));
            }
            if functions.iter().any(|(n, _): &(String, Value)| n == name) {
                return Err((format!("tools[{i}]: the function '{name}' is declared twice"), "tools"));
            }
            let params = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(_) => return Err((format!("tools[{i}].function.parameters must be a JSON schema object"), "tools")),
            };
            functions.push((name.to_string(), params));
        }
        let choice = match choice {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(name) if o.get("type").and_then(Value::as_str) == Some("function") => {
                    if !functions.iter().any(|(n, _)| n == name) {
                        return Err((format!("tool_choice names '{name}', which is not among the tools"), "tool_choice"));
                    }
                    Choice::Named(name.to_string())
                }
                _ => return Err(("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}".into(), "tool_choice")),
            },
            Some(_) => return Err(("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}".into(), "tool_choice")),
        };
        if functions.is_empty() {
            return match choice {
                Choice::Auto | Choice::None => Ok(None),
                _ => Err(("tool_choice asks for a call but no tools are given".into(), "tool_choice")),
            };
        }
        if choice == Choice::None {
            return Ok(None);
        }
        let format = template.and_then(Format::of_template).ok_or((
            "this model's chat template does not support tools (it does not read `tools` in the Hermes \
             <tool_call>, Mistral [TOOL_CALLS] or Llama 3 JSON format)"
                .to_string(),
            "tools",
        ))?;
        Ok(Some(Tools {
            format,
            functions,
            choice,
            declared: Value::Array(list.to_vec()),
        }))
    }

    /// The JSON schema of one call: `{"name": <a declared name>, <arguments key>: <its schema>}`.
    fn call_schema(&self) -> Value {
        let key = self.format.arguments_key();
        let one = |name: &str, params: &Value| {
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, key: params},
                "required": ["name", key],
                "additionalProperties": false,
            })
        };
        let calls: Vec<Value> = self
            .functions
            .iter()
            .filter(|(n, _)| match &self.choice {
                Choice::Named(want) => n == want,
                _ => true,
            })
            .map(|(n, p)| one(n, p))
            .collect();
        let mut schema = if calls.len() == 1 {
            calls.into_iter().next().unwrap_or_default()
        } else {
            json!({"anyOf": calls})
        };
        crate::grammar::close_objects(&mut schema);
        schema["x-guidance"] = json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "});
        schema
    }

    /// The grammar a reply must follow: `Some` for `"required"` and a named function.
    pub fn grammar(&self, grammars: &Grammars, tok: &Tokenizer) -> crate::Result<Option<Constraint>> {
        if matches!(self.choice, Choice::Auto | Choice::None) {
            return Ok(None);
        }
        // A tag the vocabulary has as a control token is that token, else its text.
        let tag = |text: &str| match tok.token_id(text) {
            Some(id) if tok.piece(id).is_empty() => format!("<[{id}]>"),
            _ => serde_json::to_string(text).unwrap_or_default(),
        };
        let call = self.call_schema();
        let lark = match self.format {
            Format::Hermes => format!(
                "start: {} \"\\n\" call \"\\n\" {}\ncall: %json {}\n",
                tag("<tool_call>"),
                tag("</tool_call>"),
                call
            ),
            Format::Mistral => format!(
                "start: {} \"[\" call \"]\"\ncall: %json {}\n",
                tag("[TOOL_CALLS]"),
                call
            ),
            Format::Llama3 => format!("start: call\ncall: %json {call}\n"),
        };
        grammars.lark(&lark).map(Some)
    }

    /// The calls in a reply (`text` with the control tokens' texts kept) and the text around
    /// them; `(text, [])` when the reply holds no call that parses (prose stays prose).
    pub fn extract(&self, text: &str) -> (String, Vec<(String, String)>) {
        let key = self.format.arguments_key();
        let known = |v: &Value| -> Option<(String, String)> {
            let name = v.get("name")?.as_str()?;
            if !self.functions.iter().any(|(n, _)| n == name) {
                return None;
            }
            let args = match v.get(key).or_else(|| v.get("arguments")) {
                Some(Value::String(s)) => s.clone(),
                Some(a) => a.to_string(),
                None => "{}".into(),
            };
            Some((name.to_string(), args))
        };
        match self.format {
            Format::Hermes => {
                let (mut rest, mut calls) = (String::new(), Vec::new());
                let mut s = text;
                while let Some(a) = s.find("<tool_call>") {
                    let after = &s[a + "<tool_call>".len()..];
                    let (body, next) = match after.find("</tool_call>") {
                        Some(b) => (&after[..b], &after[b + "</tool_call>".len()..]),
                        None => (after, ""),
                    };
                    match serde_json::from_str::<Value>(body.trim()).ok().as_ref().and_then(known) {
                        Some(c) => {
                            rest.push_str(&s[..a]);
                            calls.push(c);
                        }
                        None => rest.push_str(&s[..a + "<tool_call>".len() + body.len()]),
                    }
                    s = next;
                }
                rest.push_str(s);
                (rest.trim().to_string(), calls)
            }
            Format::Mistral => match text.find("[TOOL_CALLS]") {
                Some(a) => {
                    let list = text[a + "[TOOL_CALLS]".len()..].trim();
                    match serde_json::from_str::<Value>(list) {
                        Ok(Value::Array(items)) => {
                            let calls: Option<Vec<_>> = items.iter().map(known).collect();
                            match calls {
                                Some(c) if !c.is_empty() => (text[..a].trim().to_string(), c),
                                _ => (text.to_string(), Vec::new()),
                            }
                        }
                        _ => (text.to_string(), Vec::new()),
                    }
                }
                None => (text.to_string(), Vec::new()),
            },
            Format::Llama3 => {
                let body = text.trim().trim_start_matches("<|python_tag|>").trim();
                match serde_json::from_str::<Value>(body).ok().as_ref().and_then(known) {
                    Some(c) => (String::new(), vec![c]),
                    None => (text.to_string(), Vec::new()),
                }
            }
        }
    }
}

/// An assistant message's `tool_calls` as chat templates read them: each call's `arguments` an
/// object (OpenAI sends a JSON string; Hugging Face templates `tojson` it), and the
/// `function.name`/`function.arguments` fields also at the call's top level (Qwen's template reads
/// `tool_call.function` when present, others read `tool_call.name`).
pub fn calls_for_template(calls: &[Value]) -> Result<Vec<Value>, String> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.get("function").ok_or(format!("tool_calls[{i}] has no function"))?;
            let name = f.get("name").and_then(Value::as_str).ok_or(format!("tool_calls[{i}].function.name must be a string"))?;
            let args = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| format!("tool_calls[{i}].function.arguments is not JSON: {e}"))?,
                Some(v @ Value::Object(_)) => v.clone(),
                None | Some(Value::Null) => json!({}),
                Some(_) => return Err(format!("tool_calls[{i}].function.arguments must be a JSON string")),
            };
            Ok(json!({
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {"name": name, "arguments": args},
                "name": name,
                "arguments": args,
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(format: Format) -> Tools {
        Tools {
            format,
            functions: vec![("get_weather".into(), json!({"type": "object"}))],
            choice: Choice::Auto,
            declared: json!([]),
        }
    }

    #[test]
    fn each_format_parses_its_calls_and_leaves_prose_alone() {
        let h = tools(Format::Hermes);
        let (rest, calls) = h.extract("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
        assert_eq!(rest, "Let me check.");
        assert_eq!(calls, vec![("get_weather".to_string(), "{\"city\":\"Paris\"}".to_string())]);
        let (rest, calls) = h.extract("<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>");
        assert!(calls.is_empty() && rest.contains("unknown"));
        let (rest, calls) = h.extract("just prose");
        assert_eq!((rest.as_str(), calls.len()), ("just prose", 0));

        let m = tools(Format::Mistral);
        let (rest, calls) = m.extract("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]");
        assert_eq!((rest.as_str(), calls.len()), ("", 1));

        let l = tools(Format::Llama3);
        let (_, calls) = l.extract("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
        assert_eq!(calls[0].1, "{\"city\":\"Oslo\"}");
    }

    #[test]
    fn requests_are_checked_and_templates_without_tools_refused() {
        let t = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let hermes = "{% if tools %}<tool_call>{% endif %}";
        assert!(Tools::from_request(Some(&t), None, Some(hermes)).unwrap().is_some());
        assert!(Tools::from_request(Some(&t), Some(&json!("none")), Some(hermes)).unwrap().is_none());
        let (msg, param) = Tools::from_request(Some(&t), None, Some("{{ messages }}")).unwrap_err();
        assert!(msg.contains("does not support tools") && param == "tools");
        let (_, param) = Tools::from_request(Some(&t), Some(&json!({"type": "function", "function": {"name": "g"}})), Some(hermes)).unwrap_err();
        assert_eq!(param, "tool_choice");
        let (_, param) = Tools::from_request(Some(&json!([{"type": "function", "function": {"name": "bad name"}}])), None, Some(hermes)).unwrap_err();
        assert_eq!(param, "tools");
        let (_, param) = Tools::from_request(None, Some(&json!("required")), Some(hermes)).unwrap_err();
        assert_eq!(param, "tool_choice");
    }
}
