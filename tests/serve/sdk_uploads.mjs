// The official OpenAI JavaScript SDK, unmodified, sending what a phone sends (issue 38): videos.create with a 5 MB
// JPEG as input_reference must be taken by a default server, and a body past --max-body must raise APIError with
// status 413 and the server's JSON error, never APIConnectionError, every time. Retries are off, so a lost answer
// cannot hide behind a second try. Prints one JSON line of counts; the caller (test_sdk_uploads.py) checks them.
//   node sdk_uploads.mjs JPEG TIMES   (H3_URL: the server)
import fs from 'node:fs';
import OpenAI, { APIConnectionError, APIError, toFile } from 'openai';

const [jpeg, times] = [process.argv[2], Number(process.argv[3] ?? 20)];
const client = new OpenAI({ baseURL: `${process.env.H3_URL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const photo = fs.readFileSync(jpeg);
const out = { photo_bytes: photo.length, created: null, over_limit: { status_413: 0, connection_error: 0, other: [] } };

const v = await client.videos.create({
  prompt: 'the same street at night',
  input_reference: await toFile(photo, 'photo.jpg', { type: 'image/jpeg' }),
  steps: 2,
});
out.created = { status: v.status, first_image: v.request?.first_image?.filename ?? null, size: v.size };

const models = await client.models.list();
const limit = models.data[0].max_body_bytes;
const big = Buffer.alloc(limit + 1, 0xff);
out.limit = limit;
for (let i = 0; i < times; i++) {
  try {
    await client.videos.create({ prompt: 'too large', input_reference: await toFile(big, 'big.jpg', { type: 'image/jpeg' }) });
    out.over_limit.other.push('accepted');
  } catch (e) {
    if (e instanceof APIConnectionError) out.over_limit.connection_error++;
    else if (e instanceof APIError && e.status === 413 && e.error?.code === 'too_large') out.over_limit.status_413++;
    else out.over_limit.other.push(`${e.constructor.name} ${e.status}: ${String(e.message).slice(0, 120)}`);
  }
}
console.log(JSON.stringify(out));
