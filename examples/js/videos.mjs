// The official OpenAI JavaScript SDK (npm `openai`), unmodified, against `h3 serve`: create a video from text
// and one from a first frame (input_reference), follow them, download each video and its poster, make three videos
// from one request (n) and download each, list them page by page, see an error as the SDK's own class, delete them.
//
//   cd examples/js && npm install && H3_URL=http://127.0.0.1:8190 node videos.mjs [IMAGE]
//
// H3_URL: the server (default http://127.0.0.1:8190); H3_API_KEY: its --api-key, if any; H3_OUT: where the
// downloads go (default: here); H3_STEPS: denoising steps (an engine field, default 8: fast, rough).
import fs from 'node:fs';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';

// Node 18 has no global File, which the SDK needs to upload; Node 20 and later have it.
if (typeof globalThis.File === 'undefined') globalThis.File = (await import('node:buffer')).File;

const url = process.env.H3_URL ?? 'http://127.0.0.1:8190';
const out = process.env.H3_OUT ?? '.';
const image = process.argv[2] ?? new URL('../first-frame.png', import.meta.url).pathname;
const steps = Number(process.env.H3_STEPS ?? 8);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: process.env.H3_API_KEY ?? 'none' });

function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

// 1. Text to video with the SDK's own values: seconds "4" and size "1280x720" become the nearest duration and
//    canvas H3 makes (the job says which: size, seconds, parameters.notes). Engine fields (steps, seed, ...)
//    go in the same object: the SDK passes them on (TypeScript: cast the object, or `// @ts-expect-error`).
const a = await client.videos.create({
  model: 'minimax-h3',
  prompt: 'A lighthouse on a cliff at dusk, waves breaking below, gulls calling',
  seconds: '4',
  size: '1280x720',
  steps,
  seed: 7,
});
console.log(`created ${a.id}: ${a.size}, ${a.seconds} s (${a.parameters.notes.join('; ')})`);
check(a.status === 'queued' && a.size === '1280x736' && a.seconds === '5.16667', 'seconds "4" and size 1280x720 mapped');

// 2. From a first frame: input_reference is the picture the video starts on (sent as multipart/form-data).
const b = await client.videos.create({
  prompt: 'The sun sets into the sea, the sky turns orange, a boat drifts by',
  input_reference: await toFile(fs.createReadStream(image), path.basename(image), { type: 'image/png' }),
  seconds: '8',
  steps,
});
console.log(`created ${b.id} from ${path.basename(image)}: ${b.size}, ${b.seconds} s`);
check(b.request.first_image?.filename === path.basename(image), 'input_reference became the first keyframe');

// 3. Follow them until they finish (the SSE stream GET /v1/videos/{id}/events is the push alternative).
async function finished(id) {
  for (;;) {
    const v = await client.videos.retrieve(id);
    if (['completed', 'failed', 'cancelled'].includes(v.status)) return v;
    console.log(`  ${id} ${v.status} ${v.phase ?? ''} ${v.progress}%`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
const done = [await finished(a.id), await finished(b.id)];

// 4. Download each video and its poster.
for (const v of done) {
  check(v.status === 'completed', `${v.id} completed (${v.error?.message ?? 'no error'})`);
  const mp4 = Buffer.from(await (await client.videos.downloadContent(v.id)).arrayBuffer());
  fs.writeFileSync(path.join(out, `${v.id}.mp4`), mp4);
  check(mp4.length === v.bytes && mp4.subarray(4, 8).toString() === 'ftyp', `${v.id}.mp4 downloaded (${mp4.length} bytes)`);
  const png = Buffer.from(await (await client.videos.downloadContent(v.id, { variant: 'thumbnail' })).arrayBuffer());
  fs.writeFileSync(path.join(out, `${v.id}.thumbnail.png`), png);
  check(png.subarray(1, 4).toString() === 'PNG', `${v.id}.thumbnail.png downloaded (${png.length} bytes)`);
}

// 5. Several videos from one request (an engine field, n): each its own seed, listed in `videos` and downloaded one
//    by one with the query's `index` (the SDK passes it on).
const many = await finished(
  (await client.videos.create({ prompt: 'A paper boat on a puddle, three takes', seconds: '4', steps, seed: 40, n: 3 })).id,
);
check(many.status === 'completed' && many.videos.map((v) => v.seed).join() === '40,41,42', 'n: 3 made seeds 40, 41, 42');
const takes = [];
for (const v of many.videos) {
  const mp4 = Buffer.from(await (await client.videos.downloadContent(many.id, { variant: 'video', index: v.index })).arrayBuffer());
  fs.writeFileSync(path.join(out, `${many.id}-${v.index}.mp4`), mp4);
  check(mp4.length === v.bytes && mp4.subarray(4, 8).toString() === 'ftyp', `video ${v.index} of ${many.id} downloaded (${mp4.length} bytes)`);
  takes.push(mp4.toString('base64'));
}
check(new Set(takes).size === 3, 'three different videos');
done.push(many);

// 6. List page by page (limit 1 per page: the SDK follows has_more / after itself).
const listed = [];
for await (const v of client.videos.list({ limit: 1, order: 'asc' })) listed.push(v.id);
check(done.every((v) => listed.includes(v.id)), `all listed (${listed.length} jobs, one per page)`);

// 7. Errors are the SDK's classes.
try {
  await client.videos.retrieve('video_000000000000000000000000');
  check(false, 'an unknown id is refused');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, `an unknown id is a NotFoundError: ${e.message}`);
}

// 8. Delete them.
for (const v of done) {
  const d = await client.videos.delete(v.id);
  check(d.deleted === true && d.object === 'video.deleted', `${v.id} deleted`);
}
console.log('done');
