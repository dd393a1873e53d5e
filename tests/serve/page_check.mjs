// Drives h3 serve's web page in Debian's Chromium through playwright-core, as a user would: checks the form
// (presets with estimates, drop zones, LoRAs, the device's defaults, the procedural banner), drops a keyframe on
// the first-frame zone and submits, chooses a reference file and a LoRA and submits, watches the per-phase
// progress, waits for the posters, plays a video inline, deletes it. Screenshots at each stage go to OUTDIR; the
// report (checks, element boxes, screenshot paths) is printed as one JSON line for test_serve_page.py, which
// checks the pictures themselves.
// usage: node page_check.mjs URL OUTDIR IMAGE.png LORA_NAME
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [url, outdir, image, loraName] = process.argv.slice(2);
const report = { checks: [], boxes: {}, shots: {} };
function check(ok, what) {
  report.checks.push({ ok: !!ok, what });
  if (!ok) throw new Error('check failed: ' + what);
}
async function shot(page, name) {
  const file = path.join(outdir, name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  report.shots[name] = file;
}
async function box(page, selector, name) {
  const b = await page.locator(selector).first().boundingBox();
  report.boxes[name] = b;
  return b;
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'h3-page-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.H3_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync',
         '--autoplay-policy=no-user-gesture-required'],
});
let status = 0;
try {
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('server').textContent.length > 0 &&
                                   document.querySelectorAll('#presets input').length > 0);

  // 1. The form as it opens.
  check(await page.locator('#banner').isVisible(), 'the banner says the videos are test patterns (fake runner)');
  check(/no model/.test(await page.locator('#banner').textContent()), 'banner text names the reason');
  check((await page.inputValue('#size')) === '320x192' && (await page.inputValue('#steps')) === '8',
        'CPU server: small and short defaults (320x192, 8 steps)');
  check((await page.locator('#presets input').count()) === 3, 'three presets of steps');
  check(/No estimate yet/.test(await page.locator('#estimate').textContent()), 'no estimate before any job');
  check(await page.locator(`input[data-lora="${loraName}"]`).count() === 1, 'the LoRA of --lora-dir is offered');
  for (const id of ['#drop-first', '#drop-last', '#drop-refs', '#prompt', '#seconds', '#seed', '#submit'])
    check(await page.locator(id).isVisible(), `${id} present`);
  check((await page.getAttribute('#seconds', 'min')) === '5', 'the seconds input starts at 5');
  await box(page, '#banner', 'banner');
  await shot(page, '1-form');

  // 2. A keyframe dropped on the first-frame zone (a real drop event carrying a File).
  const png = fs.readFileSync(image).toString('base64');
  await page.fill('#prompt', 'page test: the sun sets into the sea');
  await page.fill('#seed', '11');
  const dt = await page.evaluateHandle((b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const d = new DataTransfer();
    d.items.add(new File([bytes], 'first-frame.png', { type: 'image/png' }));
    return d;
  }, png);
  await page.dispatchEvent('#drop-first', 'dragover', { dataTransfer: dt });
  await page.dispatchEvent('#drop-first', 'drop', { dataTransfer: dt });
  check(await page.locator('#drop-first img').count() === 1, 'the dropped keyframe is previewed');
  await shot(page, '2-keyframe');
  await page.click('#submit');
  await page.waitForSelector('.card[data-status="in_progress"] .phases span.current', { timeout: 60000 });
  check(/\d+%/.test(await page.locator('.card[data-status="in_progress"] .progress').first().textContent()),
        'the running job shows its phase, step and percentage');
  await shot(page, '3-progress');

  // 3. A reference chosen through the file dialog, with the LoRA, on the second job.
  await page.click('button[data-act="clear-first_image"]');
  await page.fill('#prompt', 'page test: a harbour, from a reference picture');
  await page.setInputFiles('#file-refs', image);
  check(await page.locator('#refs li').count() === 1, 'the reference is listed with its kind');
  await page.check(`input[data-lora="${loraName}"]`);
  await page.click('#submit');
  await page.waitForFunction(() => document.querySelectorAll('.card[data-status="completed"]').length === 2,
                             null, { timeout: 120000 });
  await page.waitForFunction(() => [...document.querySelectorAll('.card img.thumb')].filter(
    (i) => i.complete && i.naturalWidth > 0).length === 2, null, { timeout: 60000 });
  check(/Estimated time: about/.test(await page.locator('#estimate').textContent()),
        'after a job the form estimates the time from the measured step time');
  check(/\u2248/.test(await page.locator('#presets .est').first().textContent()), 'each preset shows its estimate');
  const first = page.locator('.card').filter({ hasText: 'the sun sets' });
  await box(page, '.card:has-text("the sun sets") .poster', 'poster');
  await shot(page, '4-gallery');

  // 4. Play the keyframe job inline.
  await first.locator('button[data-act="play"]').click();
  await page.waitForFunction(() => {
    const v = document.querySelector('.card video');
    return v && v.readyState >= 2 && v.currentTime > 0.3;
  }, null, { timeout: 60000 });
  const played = await page.evaluate(() => {
    const v = document.querySelector('.card video');
    return { error: v.error && v.error.code, width: v.videoWidth, time: v.currentTime };
  });
  check(played.error == null && played.width > 0, `the video plays inline (${played.width} px wide, t=${played.time})`);
  await page.evaluate(() => document.querySelector('.card video').pause());
  await box(page, '.card video', 'video');
  await shot(page, '5-playing');

  // 5. Delete it.
  const id = await first.getAttribute('data-id');
  page.once('dialog', (d) => d.accept());
  await first.locator('button[data-act="delete"]').click();
  await page.waitForFunction((i) => !document.querySelector(`.card[data-id="${i}"]`), id, { timeout: 30000 });
  check((await page.locator('.card').count()) === 1, 'the deleted video left the gallery');
  await shot(page, '6-deleted');
  report.deleted = id;
  check(errors.length === 0, 'no script error on the page: ' + errors.join('; '));
} catch (e) {
  report.error = String(e && e.stack || e);
  status = 1;
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log('REPORT ' + JSON.stringify(report));
process.exit(status);
