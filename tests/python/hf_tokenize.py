"""Hugging Face's own tokenizer over a tokenizer.json: the reference tensorlane-llm's
tokenizer.json support is checked against (llm/tests/llama_reference.rs).

    hf_tokenize.py TOKENIZER_JSON < strings.json > ids.json

Reads a JSON list of strings; prints a JSON list of token-id lists, each encoded with the
file's post-processor (add_special_tokens=True: BOS where the template adds it).
"""

import json
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
strings = json.load(sys.stdin)
print(json.dumps([tok.encode(s, add_special_tokens=True).ids for s in strings]))
