// The tokenizer of a Hugging Face model directory (tokenizer.json, read by the npm tokenizers,
// offline) served to `trident prepare` and `trident generate` over stdin/stdout, one JSON object
// a line: node tokenizer_service.mjs MODEL_DIR
//   -> first line: {"vocab_size" (largest id + 1), "prefix", "suffix", "eos", "bos"} (the ids a
//      document starts and ends with, as tokenizer_config.json or else the post-processor says),
//      "byte_ids" (a byte-fallback model's <0xNN> tokens, whose text depends on their neighbours)
//   {"encode": [text, ...]}  -> {"ids": [[id, ...], ...]}   (no special tokens added)
//   {"decode": [id, ...]}    -> {"text": string}            (special tokens spelled out)
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Tokenizer } from 'tokenizers';

const dir = process.argv[2];
const fail = (message) => {
  console.error(`tokenizer ${dir}: ${message}`);
  process.exit(3);
};
// A FIFO or device in place of a file would block or never end: regular files only.
const regular = (name) => {
  const path = join(dir, name);
  if (existsSync(path) && !statSync(path).isFile()) fail(`${name} is not a regular file`);
  return existsSync(path);
};
const read_json = (name) => {
  const path = join(dir, name);
  if (!regular(name)) return {};
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    fail(`${name}: ${e.message}`);
  }
};

let tokenizer;
if (!regular('tokenizer.json')) fail('tokenizer.json is missing');
try {
  tokenizer = Tokenizer.fromFile(join(dir, 'tokenizer.json'));
} catch (e) {
  fail(`tokenizer.json: ${e.message}`);
}
// tokenizer_config.json names BOS/EOS (a string or an AddedToken object) and may say whether a
// document starts or ends with them; special_tokens_map.json is the older place for the names.
const config = { ...read_json('special_tokens_map.json'), ...read_json('tokenizer_config.json') };
const token_id = (key) => {
  const t = config[key];
  const content = typeof t === 'string' ? t : t && t.content;
  if (!content) return null;
  const id = tokenizer.tokenToId(content);
  if (id === null || id === undefined) fail(`${key} '${content}' is not in the vocabulary`);
  return id;
};
const bos = token_id('bos_token');
const eos = token_id('eos_token');

const encode = async (text, special) =>
  (await tokenizer.encode(text, null, { addSpecialTokens: special })).getIds();
// What the post-processor adds around a text, found by encoding one with and without it.
const plain = await encode('a', false);
const full = await encode('a', true);
const at = full.findIndex((_, i) => plain.every((id, j) => full[i + j] === id));
let prefix = at < 0 ? [] : full.slice(0, at);
let suffix = at < 0 ? [] : full.slice(at + plain.length);
if (typeof config.add_bos_token === 'boolean')
  prefix = config.add_bos_token && bos !== null ? [bos] : [];
if (typeof config.add_eos_token === 'boolean')
  suffix = config.add_eos_token && eos !== null ? [eos] : [];

const reply = (object) => process.stdout.write(JSON.stringify(object) + '\n');
// The ids run to the largest one (added tokens may leave gaps), which a model's vocabulary must hold.
const vocab_size = Object.values(tokenizer.getVocab(true)).reduce((a, b) => Math.max(a, b), -1) + 1;
// Byte-fallback tokens decode as a group: one invalid byte turns the whole run into U+FFFD.
let byte_ids = [];
try {
  const model = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')).model;
  if (model && model.byte_fallback)
    byte_ids = Object.entries(model.vocab).filter(([t]) => /^<0x[0-9A-Fa-f]{2}>$/.test(t))
                     .map(([, id]) => id);
} catch (e) {
  fail(`tokenizer.json: ${e.message}`);
}
reply({ vocab_size, prefix, suffix, eos, bos, byte_ids });
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  const request = JSON.parse(line);
  if (request.encode) {
    const ids = [];
    for (const text of request.encode) ids.push(await encode(text, false));
    reply({ ids });
  } else if (request.decode) {
    reply({ text: await tokenizer.decode(request.decode, false) });
  } else {
    fail(`unknown request ${line.slice(0, 80)}`);
  }
}
