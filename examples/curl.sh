#!/usr/bin/env bash
# h3 serve with curl (and jq to read the answers): a video from text (JSON) and one from a first frame
# (multipart/form-data, the OpenAI SDKs' encoding: input_reference=@FILE), followed through the event stream,
# downloaded with its poster, listed, deleted.
#
#   H3_URL=http://127.0.0.1:8190 examples/curl.sh [IMAGE]
#
# H3_URL: the server (default http://127.0.0.1:8190, `h3 serve`'s default port); H3_API_KEY: its --api-key, if
# any; H3_OUT: where the downloads go (default: here); H3_STEPS: denoising steps (default 8: fast, rough).
set -euo pipefail
url=${H3_URL:-http://127.0.0.1:8190}
out=${H3_OUT:-.}
steps=${H3_STEPS:-8}
image=${1:-$(dirname "$0")/first-frame.png}
auth=()
if [ -n "${H3_API_KEY:-}" ]; then auth=(-H "Authorization: Bearer $H3_API_KEY"); fi
want() {  # want WHAT COMMAND...: runs the check, stops the script when it fails
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "check failed: $what" >&2; exit 1; fi
}

# 1. Text to video; seconds "4" and size 1280x720 (the SDK's values) map to the nearest H3 makes.
a=$(curl -sS --fail-with-body "${auth[@]}" "$url/v1/videos" -H 'Content-Type: application/json' \
  -d "{\"prompt\": \"A lighthouse on a cliff at dusk\", \"seconds\": \"4\", \"size\": \"1280x720\", \"steps\": $steps}")
id_a=$(jq -r .id <<<"$a")
want "created $id_a, size 1280x720 -> $(jq -r .size <<<"$a"), seconds 4 -> $(jq -r .seconds <<<"$a")" \
  test "$(jq -r .size <<<"$a")" = 1280x736

# 2. From a first frame: a multipart form (every value is text; the server turns numbers back into numbers).
b=$(curl -sS --fail-with-body "${auth[@]}" "$url/v1/videos" -F prompt='The sun sets into the sea' -F seconds=8 \
  -F steps="$steps" -F "input_reference=@$image;type=image/png")
id_b=$(jq -r .id <<<"$b")
want "created $id_b from $(basename "$image") (its first keyframe)" \
  test "$(jq -r .request.first_image.filename <<<"$b")" = "$(basename "$image")"

# 3. Follow each job: the event stream sends the job object after every change and closes after the last.
for id in "$id_a" "$id_b"; do
  last=$(curl -sS -N "${auth[@]}" "$url/v1/videos/$id/events" | grep '^data: ' | tail -1)
  want "$id completed" test "$(jq -r .status <<<"${last#data: }")" = completed
done

# 4. Download each video and its poster (variant thumbnail; spritesheet: one frame per second).
for id in "$id_a" "$id_b"; do
  curl -sS --fail-with-body "${auth[@]}" -o "$out/$id.mp4" "$url/v1/videos/$id/content"
  want "$out/$id.mp4" test "$(head -c 8 "$out/$id.mp4" | tail -c 4)" = ftyp
  curl -sS --fail-with-body "${auth[@]}" -o "$out/$id.thumbnail.png" "$url/v1/videos/$id/content?variant=thumbnail"
  want "$out/$id.thumbnail.png" test "$(head -c 4 "$out/$id.thumbnail.png" | tail -c 3)" = PNG
done

# 5. List (newest first; ?limit=N&after=ID pages on, ?status=completed filters).
list=$(curl -sS --fail-with-body "${auth[@]}" "$url/v1/videos?limit=100")
want "both listed" test "$(jq --arg a "$id_a" --arg b "$id_b" '[.data[].id | select(. == $a or . == $b)] | length' <<<"$list")" = 2

# 6. Errors are JSON: {"error": {"message", "type", "param", "code"}} with the HTTP status.
code=$(curl -sS "${auth[@]}" -o /dev/null -w '%{http_code}' "$url/v1/videos/video_000000000000000000000000")
want "an unknown id is 404" test "$code" = 404

# 7. Delete them.
for id in "$id_a" "$id_b"; do
  d=$(curl -sS --fail-with-body "${auth[@]}" -X DELETE "$url/v1/videos/$id")
  want "$id deleted" test "$(jq -r .deleted <<<"$d")" = true
done
echo done
