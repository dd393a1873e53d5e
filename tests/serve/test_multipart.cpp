// The OpenAI SDK's encoding of POST /v1/videos (serve/multipart.h) and its fields on H3's request
// (serve/openai_compat.h): bodies as the SDKs and curl write them, the bracket rules, refusals.
#include <gtest/gtest.h>

#include "serve/multipart.h"
#include "serve/openai_compat.h"
#include "serve/supervisor.h"

using h3::serve::ApiError;
using nlohmann::json;

namespace {

struct Part {
  std::string name, filename, type, data;
  bool file = false;
};

std::string body_of(const std::vector<Part>& parts, const std::string& boundary) {
  std::string b = "preamble to ignore\r\n";
  for (const Part& p : parts) {
    b += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + p.name + "\"";
    if (p.file) b += "; filename=\"" + p.filename + "\"";
    b += "\r\n";
    if (!p.type.empty()) b += "Content-Type: " + p.type + "\r\n";
    b += "\r\n" + p.data + "\r\n";
  }
  return b + "--" + boundary + "--\r\n";
}

json request_of(const std::vector<Part>& parts) {
  const std::string boundary = "openai-abc123";
  const std::string body = body_of(parts, boundary);
  return h3::serve::form_to_request(
      h3::serve::parse_multipart(body, h3::serve::multipart_boundary("multipart/form-data; boundary=" + boundary)));
}

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status;
  }
  return 0;
}

}  // namespace

TEST(ServeMultipart, TheSdksFormBecomesTheJsonRequest) {
  const std::string png("\x89PNG\r\n\x1a\n\0\x01\xff", 11);  // binary, with CR LF and NUL inside
  const json r = request_of({{"prompt", "", "", "a boat\r\non two lines"},
                             {"seconds", "", "", "4"},
                             {"size", "", "", "1280x720"},
                             {"steps", "", "", "12"},
                             {"seed", "", "", "18446744073709551615"},
                             {"shift", "", "", "7.5"},
                             {"input_reference", "first.png", "image/png", png, true}});
  EXPECT_EQ(r["prompt"], "a boat\r\non two lines");
  EXPECT_EQ(r["seconds"], "4") << "seconds stays a string, as the OpenAI API sends it";
  EXPECT_EQ(r["size"], "1280x720");
  EXPECT_EQ(r["steps"], 12);
  EXPECT_EQ(r["seed"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(r["shift"], 7.5);
  EXPECT_EQ(r["input_reference"]["filename"], "first.png");
  EXPECT_EQ(r["input_reference"]["data"], "iVBORw0KGgoAAf8=");  // base64 of the 11 bytes
}

TEST(ServeMultipart, BracketsNestAsTheSdksWriteThem) {
  const json r = request_of({{"references[][kind]", "", "", "image"},
                             {"references[][data]", "a.png", "image/png", "abc", true},
                             {"references[][kind]", "", "", "audio"},
                             {"references[][data]", "b.wav", "audio/wav", "ab", true},
                             {"references[][filename]", "", "", "given.wav"},
                             {"references[]", "c.mp4", "video/mp4", "a", true},
                             {"loras[][name]", "", "", "x.safetensors"},
                             {"loras[][strength]", "", "", "0.5"},
                             {"loras[][name]", "", "", "y.safetensors"},
                             {"steps", "", "", "many"}});
  ASSERT_EQ(r["references"].size(), 3u) << r.dump();
  EXPECT_EQ(r["references"][0], json({{"kind", "image"}, {"data", "YWJj"}, {"filename", "a.png"}}));
  EXPECT_EQ(r["references"][1], json({{"kind", "audio"}, {"data", "YWI="}, {"filename", "given.wav"}}));
  EXPECT_EQ(r["references"][2], json({{"kind", "video"}, {"data", "YQ=="}, {"filename", "c.mp4"}}));
  EXPECT_EQ(r["loras"], json::parse(R"([{"name": "x.safetensors", "strength": 0.5}, {"name": "y.safetensors"}])"));
  EXPECT_EQ(r["steps"], "many") << "not a number: left for the request check to refuse by name";
}

// The Python SDK (httpx) sends a form's parts grouped by name: all `loras[][name]`, then all `loras[][strength]`.
TEST(ServeMultipart, ThePythonSdksGroupedPartsMakeTheSameElements) {
  const json grouped = request_of({{"prompt", "", "", "a"},
                                   {"loras[][name]", "", "", "x.safetensors"},
                                   {"loras[][name]", "", "", "y.safetensors"},
                                   {"loras[][strength]", "", "", "0.5"},
                                   {"loras[][strength]", "", "", "1"}});
  const json interleaved = request_of({{"prompt", "", "", "a"},
                                       {"loras[][name]", "", "", "x.safetensors"},
                                       {"loras[][strength]", "", "", "0.5"},
                                       {"loras[][name]", "", "", "y.safetensors"},
                                       {"loras[][strength]", "", "", "1"}});
  const json want = json::parse(R"([{"name": "x.safetensors", "strength": 0.5}, {"name": "y.safetensors",
                                    "strength": 1}])");
  EXPECT_EQ(grouped["loras"], want) << grouped.dump();
  EXPECT_EQ(interleaved["loras"], want) << interleaved.dump();
  // Elements with different fields in the grouped order cannot be told apart: refused, naming the field.
  try {
    request_of({{"loras[][name]", "", "", "x.safetensors"},
                {"loras[][name]", "", "", "y.safetensors"},
                {"loras[][strength]", "", "", "0.5"}});
    ADD_FAILURE() << "an ambiguous grouped form was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find("'loras'"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("same fields"), std::string::npos) << e.message;
  }
}

TEST(ServeMultipart, MalformedBodiesAre400) {
  using h3::serve::parse_multipart;
  EXPECT_EQ(status_of([] { h3::serve::multipart_boundary("multipart/form-data"); }), 400);
  EXPECT_EQ(status_of([] { parse_multipart("no boundary here", "xyz"); }), 400);
  EXPECT_EQ(
      status_of([] { parse_multipart("--xyz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\ntrunc", "xyz"); }),
      400);
  EXPECT_EQ(status_of([] { parse_multipart("--xyz\r\nContent-Disposition: form-data\r\n\r\nv\r\n--xyz--", "xyz"); }),
            400)
      << "a part without a name";
  EXPECT_EQ(status_of([] { request_of({{"prompt", "", "", "a"}, {"prompt", "", "", "b"}}); }), 400) << "twice";
  EXPECT_EQ(status_of([] { request_of({{"a[b", "", "", "x"}}); }), 400) << "unbalanced bracket";
  EXPECT_EQ(status_of([] { request_of({{"a[]", "", "", "x"}, {"a[b]", "", "", "y"}}); }), 400) << "list and object";
  EXPECT_EQ(status_of([] { request_of({{"a[b][c][d][e]", "", "", "x"}}); }), 400) << "too deep";
  EXPECT_EQ(status_of([] { request_of({{"first_image", "k.png", "image/png", "", true}}); }), 400) << "empty file";
  std::vector<Part> many(h3::serve::kMaxParts + 1, Part{"x[]", "", "", "1"});
  EXPECT_EQ(status_of([&] { request_of(many); }), 400) << "too many parts";
  // Quoted boundaries and header names in any case are fine.
  const std::string body = "--q q\r\ncontent-disposition: form-data; NAME=\"prompt\"\r\n\r\nhi\r\n--q q--";
  const json r = h3::serve::form_to_request(
      parse_multipart(body, h3::serve::multipart_boundary("multipart/form-data; boundary=\"q q\"")));
  EXPECT_EQ(r, json({{"prompt", "hi"}}));
}

TEST(ServeOpenAi, SdkSizesMapToTheNearestCanvas) {
  using h3::serve::nearest_canvas;
  const int64_t area = 768 * 1344;
  EXPECT_EQ(nearest_canvas(1280, 720, 32, area), std::make_pair(int64_t{1280}, int64_t{736}));
  EXPECT_EQ(nearest_canvas(720, 1280, 32, area), std::make_pair(int64_t{736}, int64_t{1280}));
  EXPECT_EQ(nearest_canvas(1792, 1024, 32, area), std::make_pair(int64_t{1344}, int64_t{768}));
  EXPECT_EQ(nearest_canvas(1024, 1792, 32, area), std::make_pair(int64_t{768}, int64_t{1344}));
  EXPECT_EQ(nearest_canvas(10, 10, 32, area), std::make_pair(int64_t{32}, int64_t{32}));

  const json limits = {{"canvas_multiple", 32}, {"max_canvas_pixels", area}, {"min_frames", 124}};
  json gen = {{"width", 1280}, {"height", 720}, {"seconds", 4.0}};
  auto notes = h3::serve::map_openai_geometry({{"size", "1280x720"}, {"seconds", "4"}}, gen, limits);
  EXPECT_EQ(gen, json({{"width", 1280}, {"height", 736}, {"frames", 124}}));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("1280x720 (an OpenAI size) -> 1280x736"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("-> 124 frames"), std::string::npos) << notes[1];
  // H3's own sizes and durations are left alone; sizes that are neither stay for resolve() to refuse.
  for (const char* size : {"1344x768", "1000x700"}) {
    json g = {{"width", 1}, {"height", 1}, {"seconds", 8.0}};
    EXPECT_TRUE(h3::serve::map_openai_geometry({{"size", size}}, g, limits).empty());
    EXPECT_EQ(g, json({{"width", 1}, {"height", 1}, {"seconds", 8.0}}));
  }
  json g = {{"seconds", 4.9}};  // 118 frames snap up to 124: H3 makes it as asked
  EXPECT_TRUE(h3::serve::map_openai_geometry(json::object(), g, limits).empty());
}

TEST(ServeOpenAi, InputReferenceIsTheFirstKeyframe) {
  using h3::serve::input_reference_to_keyframe;
  json a = {{"prompt", "p"}, {"input_reference", {{"data", "YWJj"}, {"filename", "k.png"}}}};
  input_reference_to_keyframe(a);
  EXPECT_EQ(a, json({{"prompt", "p"}, {"first_image", {{"data", "YWJj"}, {"filename", "k.png"}}}}));
  json b = {{"input_reference", {{"image_url", "data:image/jpeg;base64,/9j/"}}}};
  input_reference_to_keyframe(b);
  EXPECT_EQ(b, json({{"first_image", {{"data", "/9j/"}, {"filename", "input_reference.jpeg"}}}}));
  json c = {{"input_reference", "data:image/png;base64,iVBO"}};
  input_reference_to_keyframe(c);
  EXPECT_EQ(c["first_image"]["filename"], "input_reference.png");
  for (const json& refused : {json{{"input_reference", {{"image_url", "https://example.com/a.png"}}}},
                              json{{"input_reference", {{"image_url", "data:image/png,%89PNG"}}}},
                              json{{"input_reference", {{"file_id", "file-abc"}}}}, json{{"input_reference", 5}},
                              json{{"input_reference", {{"data", "YQ=="}}}, {"first_image", {{"data", "YQ=="}}}}}) {
    json r = refused;
    EXPECT_EQ(status_of([&] { input_reference_to_keyframe(r); }), 400) << refused.dump();
  }
}
