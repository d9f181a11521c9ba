// GPT-2 BPE (r50k_base, via the npm package gpt-tokenizer, offline) of a text file into
// llm.c-format train/val token files: node encode_gpt2.mjs TEXT OUT_DIR NAME [VAL_FRACTION]
import { readFileSync, writeFileSync, renameSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { encode } from 'gpt-tokenizer/encoding/r50k_base';

const [text_path, out_dir = 'data', name = 'corpus', val_arg = '0.05'] = process.argv.slice(2);
if (!text_path) {
  console.error('usage: node encode_gpt2.mjs TEXT OUT_DIR NAME [VAL_FRACTION]');
  process.exit(2);
}
const val_fraction = Number(val_arg);
if (!(val_fraction > 0 && val_fraction < 1)) {
  console.error(`val fraction ${val_arg} must be in (0, 1)`);
  process.exit(2);
}
const text = readFileSync(text_path, 'utf8');
// Encode line blocks so progress can be shown on large corpora.
const lines = text.split(/(?<=\n)/);
const block = Math.max(1, Math.ceil(lines.length / 10));
const tokens = [];
for (let i = 0; i < lines.length; i += block) {
  for (const t of encode(lines.slice(i, i + block).join(''))) tokens.push(t);
  const done = Math.min(lines.length, i + block);
  console.error(`encode_gpt2: ${done} / ${lines.length} lines, ${tokens.length} tokens`);
}

function write_bin(path, toks) {
  const header = new Int32Array(256);
  header[0] = 20240520;  // llm.c magic
  header[1] = 1;         // version: uint16 tokens
  header[2] = toks.length;
  const body = Uint16Array.from(toks);
  const buf = Buffer.concat([Buffer.from(header.buffer), Buffer.from(body.buffer)]);
  writeFileSync(path + '.tmp', buf);
  renameSync(path + '.tmp', path);
  console.error(`encode_gpt2: wrote ${path} (${toks.length} tokens)`);
}

mkdirSync(out_dir, { recursive: true });
const n_val = Math.floor(tokens.length * val_fraction);
write_bin(join(out_dir, `${name}_gpt2_train.bin`), tokens.slice(0, tokens.length - n_val));
write_bin(join(out_dir, `${name}_gpt2_val.bin`), tokens.slice(tokens.length - n_val));
