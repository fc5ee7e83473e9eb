#!/usr/bin/env node
// generate.mjs writes tokenizer/testdata/parity.json: a list of {"text", "ids"} where
// ids are the Qwen3 token ids Hugging Face's tokenizer gives for text. The Go tokenizer
// (package tokenizer) must reproduce every entry exactly; this file is its proof.
//
// Two independent implementations produce the ids and must agree on every text, or
// the script fails and writes nothing:
//   - @huggingface/tokenizers 0.2.0, the pure-JS tokenizer library of transformers.js;
//   - tokenizers 0.23.2, Hugging Face's Rust tokenizers crate through its Node binding,
//     the very code `transformers` runs in Python.
//
// Control tokens. The embedding server tokenizes user text the way HF does with
// split_special_tokens=True: a literal "<|endoftext|>" in text is ordinary characters,
// never id 151643. Neither library exposes that switch, so both load a copy of
// tokenizer.json whose added_tokens list keeps only the non-special entries (<think>,
// <tool_call>, <|fim_prefix|>, ...). HF's added-vocabulary search works the same way
// with split_special_tokens=True: special matches are found and then left in the text;
// for Qwen3 no special literal overlaps a non-special one, so the two are the same.
// The Rust library renumbers the remaining added tokens when loaded that way, so its
// ids are mapped back through their content. As a cross-check, every text that holds
// no added-token literal is also encoded by the unmodified tokenizer.json, which must
// give the same ids.
//
// Texts: hand-written edge cases (below), the files in testdata/corpus (see its
// README), seeded pseudo-random strings over a pool of awkward characters, and one long
// document of more than 20,000 tokens. Characters are limited to those assigned by
// Unicode 15.0 (Go 1.26's tables): the two libraries themselves classify later ones
// differently (the Rust one by Unicode 16, the JS one by Node's, 17 on Node 20.20).
//
// Usage (from the repository root, after scripts/fetch-tokenizer.sh):
//   cd tools/tokenizer-parity && npm ci
//   node generate.mjs            # writes ../../tokenizer/testdata/parity.json
//   node generate.mjs --check    # fails if the committed file differs from a fresh run
//   node generate.mjs --tokenizer PATH --out PATH

import fs from "node:fs";
import path from "node:path";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { Tokenizer as JsTokenizer } from "@huggingface/tokenizers";
import rustTokenizers from "tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");

function parseArgs(argv) {
  const args = {
    tokenizer: path.join(root, ".cache", "qwen3", "tokenizer.json"),
    out: path.join(root, "tokenizer", "testdata", "parity.json"),
    check: false,
  };
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case "--check":
        args.check = true;
        break;
      case "--tokenizer":
        args.tokenizer = argv[++i];
        break;
      case "--out":
        args.out = argv[++i];
        break;
      default:
        throw new Error(`unknown argument ${argv[i]}; see the comment at the top of generate.mjs`);
    }
  }
  return args;
}

// The tokenizer.json this generator was written against (scripts/fetch-tokenizer.sh
// pins the same file).
const TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4";

// ---- texts -------------------------------------------------------------------------

const QUERY_INSTRUCT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:";

const handWritten = [
  // English prose
  "hello world",
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
  "It was the best of times, it was the worst of times.",
  "Embeddings map text to vectors; similar meanings land close together.",
  "a",
  "A",
  "",
  // contractions in every case
  "I'm", "I'M", "i'M", "I'm sure they'll say we've done what you're told, and it's fine, he'd agree.",
  "I'M SURE THEY'LL SAY WE'VE DONE WHAT YOU'RE TOLD, AND IT'S FINE, HE'D AGREE.",
  "they'LL", "They'Ll", "WE'Ve", "you'rE", "It'S", "don't", "DON'T", "He'D", "she's", "SHE'S",
  "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'LL", "'d", "'", "''", "'''s", "'sup", "'x",
  "rock 'n' roll", "o'clock", "James' book", "the '90s", "'quoted'", "' spaced '",
  "it'ſ", "'ſtuff", "'ß", "'K",
  // whitespace
  " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r", " \n", "\n ", " \n ",
  "a\n\n\nb", "a \n b", "a  \n  b", "  leading spaces", "trailing spaces  ", "  both  ", "\tlead tab",
  "trail tab\t", "a\tb", "a \t b", "a\t\t b", "x\u00a0y", "x\u00a0\u00a0y", "x\u3000y", "x\u3000\u3000y",
  "a\u2028b", "a\u2029b", "a\u0085b", "\u000b\u000c", "line1\r\nline2\r\n", "    indented four",
  "mixed \t\n \t end", " \r\n ", "word   \n", "end with newline\n", "\n\nstarts with newlines",
  "many     spaces     between", "x" + " ".repeat(17) + "y", " ".repeat(100), "\n".repeat(50),
  "\t".repeat(20) + "deep", "a \u2009b\u202fc\u205fd",
  // numbers and digit runs
  "0", "7", "42", "12345678901234567890", "3.14159", "1,000,000", "2024-06-01", "v1.2.3",
  "-42", "+1 (555) 010-9999", "1e-7", "0x1F", "$100.00", "50%", "10km", "A4", "x86_64",
  "\u0661\u0662\u0663\u0664", "\u00b2\u00b3", "\u00bd \u00bc", "\u216b", "\uff11\uff12\uff13", "\u0967\u0968",
  "1".repeat(100),
  // URLs and addresses
  "https://example.com/path/to/page?q=1&r=two#frag",
  "http://localhost:8080/v1/embeddings",
  "ftp://ftp.example.net/pub/file-1.2.tar.gz",
  "user.name+tag@example.org",
  "www.example.com/\u00fcber/caf\u00e9",
  "see <https://example.com> or [link](http://a.b/c_d)",
  // punctuation runs
  "!!!", "...", "?!?!", "---", "***bold***", "(parenthesised)", "[brackets]", "{braces}",
  "<tag attr=\"v\">text</tag>", "a -> b => c", "x == y && y != z || !w", "!==", ":-)", ";-(",
  "\u00af\\_(\u30c4)_/\u00af", "\u201ccurly quotes\u201d", "\u2018single\u2019", "em\u2014dash \u2013 en",
  "wait\u2026", "\u00abguillemets\u00bb", "\u300c\u304b\u304e\u62ec\u5f27\u300d", "\u3002\uff0c\u3001",
  "!".repeat(200), ".\n", "?\r\n", "!!\n\n", " ;\n", "#include <stdio.h>",
  // code
  "func main() {\n\tfmt.Println(\"hi\")\n}\n",
  "if err != nil {\n\t\treturn fmt.Errorf(\"open %s: %w\", path, err)\n\t}",
  "def f(x):\n    return x ** 2\n\n\nclass A:\n    pass\n",
  "    for i in range(10):\n        print(i)\n",
  "{\n  \"a\": 1,\n  \"b\": [true, false, null],\n  \"c\": {\"d\": \"e\"}\n}",
  "{\"k\":\"v\",\"n\":-1.5e+10}",
  "$ ls -la | grep '.go$' > out.txt 2>&1",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "<!DOCTYPE html><html><body><p class=\"x\">Hi</p></body></html>",
  "^[a-zA-Z0-9_.+-]+@[a-zA-Z0-9-]+\\.[a-zA-Z0-9-.]+$",
  "x := []int{1, 2, 3}\ny := map[string]int{\"a\": 1}",
  "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
  // CJK, Arabic, Hebrew, Hindi, Thai and other scripts
  "\u4e2d\u6587", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
  "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
  "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
  "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
  "\u4e2d".repeat(300), "English\u4e2d\u6587\u6df7\u5408mixed\u6587\u672c",
  // emoji: modifiers, ZWJ sequences, flags, keycaps
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffd", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66",
  "\ud83c\udff3\ufe0f\u200d\ud83c\udf08", "\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5", "\u2764\ufe0f",
  "\ud83e\uddd1\ud83c\udfff\u200d\ud83d\ude80", "emoji\ud83d\ude00inside", "1\ufe0f\u20e3 #\ufe0f\u20e3",
  "\ud83d\ude00".repeat(50),
  // combining marks and NFC
  "cafe\u0301 nai\u0308ve", "e\u0301", "A\u030a", "n\u0303", "\u1100\u1161\u11a8", "a\u0301\u0327",
  "\u0301 leading combining mark", "\u212b \u2126 \u212a", "\ufb01 ligature", "\u00c5\u00e9\u00f1",
  "o\u0308\u0304", "\u0915\u094d\u0937", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334",
  // odd characters
  "\u0000", "\u0001\u0002", "\u007f", "soft\u00adhyphen", "zero\u200bwidth", "\ufeffBOM", "\ufffd",
  "\ue000 private use", "\u200e\u200fbidi marks",
  // long runs
  "a".repeat(1000), "ab".repeat(300), "Supercalifragilisticexpialidocious".repeat(20),
  // control-token literals: ordinary text
  "<|endoftext|>", "<|im_start|>", "<|im_end|>",
  "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
  "text <|endoftext|> more", "<|endoftext|><|endoftext|>",
  "<|vision_start|><|image_pad|><|vision_end|>", "<|object_ref_start|>x<|object_ref_end|>",
  "<|endoftext|", "|endoftext|>", "<|EndOfText|>",
  // user-defined tokens: single ids
  "<think>", "</think>", "<think>\nreasoning\n</think>\n\nanswer", "<think><think>",
  "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
  "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>repo",
  "<tool_response>ok</tool_response>", "<thinking>", "<think", "think>", "<<think>>",
  "<|im_start|><think>", "<|endoftext|<think>", "e<think>\u0301", "cafe\u0301<think>nai\u0308ve",
  " <think> ", "\n<think>\n",
  // Qwen3 query wrapping
  QUERY_INSTRUCT + "what is x",
  QUERY_INSTRUCT + "What is the capital of China?",
  QUERY_INSTRUCT + "Explain gravity",
  QUERY_INSTRUCT + "\u5982\u4f55\u5b66\u4e60\u673a\u5668\u5b66\u4e60\uff1f",
  "Instruct: Given a question, retrieve Wikipedia passages that answer the question\nQuery: where is Paris",
];

// Awkward characters for the pseudo-random strings; all assigned in Unicode 15.0.
const pool = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
  ..."     \t\t\n\n\r\u000b\u000c",
  ..."''''sStTrReEvVmMlLdD",
  "\u017f", "\u00df", "\u1e9e", "\u212a", "\u01c5", "\ufb06", "\u1e97",
  ..."!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~",
  "\u0085", "\u00a0", "\u3000", "\u2028", "\u2029", "\u200b", "\ufeff", "\u1680", "\u2009", "\u202f",
  "\u0301", "\u0308", "\u0327", "\u0300",
  ..."\u4e2d\u6587\u5b57\u65e5\u672c\u8a9e\u3072\u3089\u304c\u30ab\u30bf\ud55c\uad6d\uc5b4",
  ..."\u0627\u0644\u0639\u0631\u0628\u05e2\u05d1\u05e8\u0939\u093f\u0928\u094d\u0926\u0e20\u0e32\u0e29\u0e44\u0e17",
  "\ud83d\ude00", "\ud83d\udc4d", "\ud83c\udffd", "\u200d", "\ufe0f", "\ud83c\uddfa", "\ud83c\uddf8",
  "\u00b2", "\u216b", "\u00bd", "\uff11", "\u0663", "\ud835\udc00", "\u03b1", "\u0436", "\u20ac", "\u00a9",
  "\u0000", "\u0001", "\u007f", "\u00ad",
  "<think>", "</think>", "<|endoftext|>", "<|im_start|>", "<|fim_prefix|>", "<tool_call>", "<|", "|>",
  "e\u0301", "A\u030a", "\u1100\u1161", "\u0915\u094d\u0937",
];

// mulberry32: a small seeded generator, so every run writes the same file.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomStrings(n, seed) {
  const rnd = prng(seed);
  const out = [];
  for (let k = 0; k < n; k++) {
    const len = 1 + Math.floor(rnd() * 40);
    let s = "";
    for (let i = 0; i < len; i++) s += pool[Math.floor(rnd() * pool.length)];
    out.push(s);
  }
  return out;
}

function readCorpus(name) {
  return fs.readFileSync(path.join(root, "testdata", "corpus", name), "utf8");
}

function corpusTexts() {
  const texts = [];
  const gettysburg = readCorpus("gettysburg.txt");
  texts.push(gettysburg, ...gettysburg.split(/\n(?=  )/));
  const multi = readCorpus("multilingual.txt");
  texts.push(multi, ...multi.split("\n").filter((l) => l !== ""));
  for (const f of ["sample.go.txt", "sample.py.txt", "sample.json.txt"]) {
    const code = readCorpus(path.join("code", f));
    texts.push(code, code.split("\n").slice(0, 8).join("\n"));
  }
  const opticks = readCorpus("opticks.txt");
  const paragraphs = opticks.split(/\n\n+/).filter((p) => p.trim() !== "");
  const step = Math.floor(paragraphs.length / 80);
  for (let i = 0; i < paragraphs.length; i += step) texts.push(paragraphs[i]);
  // The long document: the first paragraphs of Opticks, about 25,000 tokens.
  let doc = "";
  for (const p of opticks.split(/(?<=\n\n)/)) {
    if (doc.length > 110000) break;
    doc += p;
  }
  texts.push(doc);
  return texts;
}

// ---- encoding ------------------------------------------------------------------------

function loadTokenizers(tokenizerPath) {
  const raw = fs.readFileSync(tokenizerPath);
  const sha = createHash("sha256").update(raw).digest("hex");
  if (sha !== TOKENIZER_SHA256) {
    throw new Error(`${tokenizerPath} has sha256 ${sha}, want ${TOKENIZER_SHA256}; run scripts/fetch-tokenizer.sh`);
  }
  const original = JSON.parse(raw.toString("utf8"));
  // split_special_tokens=True: keep only the non-special added tokens (see the top).
  const split = structuredClone(original);
  split.added_tokens = split.added_tokens.filter((t) => !t.special);
  const config = {}; // nothing in tokenizer_config.json changes how Qwen3 encodes

  const idByContent = new Map(original.added_tokens.map((t) => [t.content, t.id]));
  const rust = rustTokenizers.Tokenizer.fromString(JSON.stringify(split));
  const modelSize = Object.keys(original.model.vocab).length;
  const rustIDs = (ids) =>
    ids.map((id) => {
      if (id < modelSize) return id;
      const content = rust.idToToken(id);
      if (!idByContent.has(content)) throw new Error(`rust returned unknown added id ${id} (${content})`);
      return idByContent.get(content);
    });

  return {
    literals: original.added_tokens.map((t) => t.content),
    jsSplit: new JsTokenizer(split, config),
    jsOriginal: new JsTokenizer(original, config),
    async encode(text) {
      const js = this.jsSplit.encode(text, { add_special_tokens: false }).ids;
      const rs = rustIDs((await rust.encode(text, null, { addSpecialTokens: false })).getIds());
      return { js, rs };
    },
  };
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const tok = loadTokenizers(args.tokenizer);

  const seen = new Set();
  const texts = [];
  for (const t of [...handWritten, ...corpusTexts(), ...randomStrings(300, 20240601)]) {
    if (!seen.has(t)) {
      seen.add(t);
      texts.push(t);
    }
  }

  const entries = [];
  let crossChecked = 0;
  let longest = 0;
  for (const text of texts) {
    const { js, rs } = await tok.encode(text);
    if (!same(js, rs)) {
      throw new Error(`the two implementations disagree on ${JSON.stringify(text)}:\n js   ${JSON.stringify(js)}\n rust ${JSON.stringify(rs)}`);
    }
    if (!tok.literals.some((l) => text.includes(l))) {
      const orig = tok.jsOriginal.encode(text, { add_special_tokens: false }).ids;
      if (!same(orig, js)) {
        throw new Error(`the unmodified tokenizer.json gives other ids for ${JSON.stringify(text)}:\n ${JSON.stringify(orig)}\n ${JSON.stringify(js)}`);
      }
      crossChecked++;
    }
    longest = Math.max(longest, js.length);
    entries.push({ text, ids: js });
  }

  const expectCafe = [924, 58858, 94880, 586];
  const cafe = entries.find((e) => e.text === "cafe\u0301 nai\u0308ve");
  if (!cafe || !same(cafe.ids, expectCafe)) {
    throw new Error(`"cafe\\u0301 nai\\u0308ve" gave ${JSON.stringify(cafe?.ids)}, want ${JSON.stringify(expectCafe)}`);
  }
  if (entries.length < 200) throw new Error(`only ${entries.length} texts; want at least 200`);
  if (longest < 20000) throw new Error(`the longest text has ${longest} tokens; want at least 20000`);

  // One entry per line keeps diffs of the committed file readable.
  const out = "[\n" + entries.map((e) => JSON.stringify(e)).join(",\n") + "\n]\n";
  const rel = path.relative(root, args.out);
  if (args.check) {
    const have = fs.existsSync(args.out) ? fs.readFileSync(args.out, "utf8") : "";
    if (have !== out) {
      throw new Error(`${rel} is not what the generator writes now; run node generate.mjs and commit the result`);
    }
    console.log(`${rel} is up to date: ${entries.length} texts`);
    return;
  }
  fs.mkdirSync(path.dirname(args.out), { recursive: true });
  fs.writeFileSync(args.out, out);
  console.log(`wrote ${rel}: ${entries.length} texts (${crossChecked} also checked against the unmodified tokenizer.json), longest ${longest} tokens, ${out.length} bytes`);
}

main().catch((err) => {
  console.error(`tokenizer-parity: ${err.message}`);
  process.exit(1);
});
