#!/usr/bin/env python3
# Writes the tokenizer test corpus: a JSON list of UTF-8 strings that the real Qwen3 tokenizer is checked on
# (tests/reference/tokenizer-qwen3-corpus.json). Hand-written strings cover each class the pre-tokenizer regex,
# NFC and the added-token cut treat differently (contractions in any case, digits, CJK, emoji sequences,
# combining marks, code, whitespace runs, line endings, special tokens); seeded random strings mix them. The ids
# come from Hugging Face `tokenizers` on the device machine (scripts/device/make_tokenizer_cases.py), never from
# this engine.
#
#     python3 scripts/make_tokenizer_corpus.py tests/reference/tokenizer-qwen3-corpus.json
import json
import random
import sys

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>", "<|object_ref_start|>", "<|box_start|>", "<|quad_end|>", "<tool_call>", "</tool_call>",
           "<think>", "</think>", "<|fim_prefix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]

HAND = [
    # empty, single characters, plain prose
    "", " ", "a", "A", "\n", "\t", ".", "0", "é", "中", "😀",
    "Hello world", "Hello, world!", "hello world.", "The quick brown fox jumps over the lazy dog.",
    "A cinematic shot of a red fox running through fresh snow at dawn, soft golden light.",
    "Two people talk in a noisy cafe; one laughs, the other spills coffee.",
    "She said: \"I'll be there at 5 o'clock.\"", "It's, isn't, they're, we've, I'm, you'll, he'd",
    "IT'S ISN'T THEY'RE WE'VE I'M YOU'LL HE'D", "It'S tHeY'Re We'Ve i'M yOu'Ll hE'd", "'s 't 're 've 'm 'll 'd",
    "rock'n'roll", "O'Brien's dog's bone", "don’t (curly apostrophe)", "``quoted'' and 'single'",
    # numbers
    "1", "12", "123", "1234567890", "3.14159265358979", "1,000,000", "-42", "+7 (555) 123-4567", "2026-12-02",
    "12:30:45.678", "0x1F600", "1e-6", "version 2.11.0rc1", "١٢٣ ٤٥٦", "一二三 123", "Ⅻ ½ ² ³", "①②③",
    # CJK and other scripts
    "一只猫坐在窗台上，看着外面的雨。", "镜头缓慢推进，城市夜景霓虹闪烁。", "这是一个测试。This is a test.",
    "日本語のテキストです。カタカナとひらがな。", "東京タワーの夜景、ゆっくりとズームイン。",
    "한국어 문장입니다. 안녕하세요!", "서울의 밤거리를 걷는 사람들", "Привет, мир! Как дела?",
    "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới",
    "ဟယ်လို", "ሰላም ልዑል", "Բարեւ աշխարհ", "გამარჯობა", "Здравейте", "Ærøskøbing Ørsted Åland",
    "naïve café résumé coöperate", "Straße groß", "İstanbul ılık", "ﬁ ﬂ ﬀ ligatures", "ＡＢＣ　ｆｕｌｌｗｉｄｔｈ",
    "半角ｶﾀｶﾅ", "〜〜〜", "「引用」『二重』【括弧】", "…——–", "中文，标点。！？；：",
    # NFC: decomposed input, canonical singletons, compatibility ideographs
    "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u2126", "\u212a", "n\u0303o", "o\u0308\u0304",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uf900\uf901\uf902", "\u2f00\u2f01",
    "q\u0303", "x\u0323\u0302", "a\u0300\u0301\u0302\u0303", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f"
    "\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L"
    "\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342"
    "\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333", "Vie\u0323\u0302t Nam", "\u0915\u094d\u0937",
    "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "\u0628\u0650\u0633\u0652\u0645\u0650", "\u0e01\u0e34\u0e48",
    "\u00c5\u0301", "\u0041\u0308\u0301", "\u1e9b\u0323",
    # emoji
    "😀😃😄😁", "I ❤️ NY", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 🏴‍☠️", "🇺🇸🇯🇵🇨🇳🇫🇷",
    "1️⃣2️⃣#️⃣", "☺︎ ☺️", "🧑‍💻 coding", "🫠🫡🫶", "🐈‍⬛ black cat", "emoji😀inside", "🔥🔥🔥🔥🔥🔥🔥🔥",
    "©®™ ℗ ℠", "★☆✓✗✔✘", "♠♣♥♦", "→←↑↓↔", "∑∫√∞≈≠≤≥", "∀x∈ℝ: x²≥0", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙",
    "𠀀𠀁 rare CJK ext B", "🀄🃏🎴",
    # code
    "def f(x):\n    return x * 2\n", "for i in range(10):\n\tprint(i)\n", "if (a && b || !c) { x += 1; }",
    "int main(int argc, char** argv) {\n  return 0;\n}\n", "#include <vector>\nstd::vector<int> v{1, 2, 3};",
    "SELECT * FROM users WHERE id = 42;", "{\"key\": [1, 2, {\"nested\": null}], \"b\": true}",
    "<div class=\"a\">Hello <b>world</b></div>", "const f = (a, b) => a ?? b?.c;", "x = [i**2 for i in xs if i % 2]",
    "git commit -m \"fix: tokenizer\" && git push origin main", "ls -la | grep '\\.cpp$' | wc -l",
    "regex: ^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$", "path/to/file.safetensors.index.json",
    "https://huggingface.co/Qwen/Qwen3-VL-32B-Instruct?tab=files#main", "user.name+tag@example.co.uk",
    "a=b&c=d%20e", "snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "__init__ __name__ == \"__main__\"",
    "// comment\n/* block\n   comment */", "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```",
    "| a | b |\n|---|---|\n| 1 | 2 |", "$x^2 + y^2 = z^2$ and \\frac{a}{b}", "0b1010 0o755 0xdeadBEEF 1_000_000",
    "std::map<std::string, std::vector<int64_t>> m;", "fn main() { println!(\"{}\", 1); }", "@decorator\nclass A: pass",
    "\"\"\"docstring\"\"\"", "''' triple '''", "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6", "!!!???...,,,;;;:::",
    "((()))[[[]]]{{{}}}<<<>>>", "~`!@#$%^&*()_+-={}[]|\\:;\"'<>,.?/",
    # whitespace runs and line endings
    "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \t b", "a\nb", "a\n\nb", "a\n\n\nb", "a\r\nb",
    "a\r\n\r\nb", "a\rb", "line1\nline2\r\nline3\rline4", "  leading", "trailing  ", "  both  ", "\n\nleading newlines",
    "trailing newlines\n\n", " \n \n ", "\t\n\t\n", "  \n", "\n  ", "x\n    y", "x\n        y", "a\u00a0b",
    "a\u3000b", "a\u2003b", "a\u2028b", "a\u2029b", "a\u200bb", "a\u200db", "a\ufeffb", "a\u000bb", "a\u000cb",
    "a\u0085b", " " * 2, " " * 3, " " * 16, " " * 17, " " * 64, " " * 100, " " * 1000, "\n" * 10, "\t" * 20,
    " \t" * 30, "\r\n" * 8, "a" + " " * 50 + "b", "x" + "\n" * 5 + " " * 5 + "y", " " * 7 + "\n" + " " * 7,
    "word " * 40, "   indented text\n      more indented\n", "end with space ", "end with tab\t",
    # special (added) tokens, as text
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>",
    "<Picture 1>: <|vision_start|><|image_pad|><|image_pad|><|vision_end|>A dog runs.",
    "<Video 1>: <0.2 seconds><|vision_start|><|video_pad|><|vision_end|><1.2 seconds><|vision_start|>"
    "<|video_pad|><|vision_end|>", "<Audio 1>: <Video 2>: a street at night", "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>{\"name\": \"f\"}</tool_call>", "text<|endoftext|>more text", "<|endoftext|><|endoftext|>",
    "x<|im_end|>y", " <|im_end|> ", "<|im_start", "im_start|>", "<|im_start |>", "< |im_end| >", "<|IM_START|>",
    "<|<|im_start|>|>", "<<|vision_end|>>", "<|image_pad|>" * 12, "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>",
    "<|file_sep|>a.py\n<|repo_name|>h3", "<|endoftext|>\n\n", "\n<|im_end|>\n", "<think></think>",
    "<|box_start|>(10,20),(30,40)<|box_end|>", "<|quad_start|><|quad_end|>", "<|object_ref_start|>cat<|object_ref_end|>",
    # H3-style prompts
    "A woman in a red coat walks across a rainy street in Tokyo at night; neon reflections, handheld camera, "
    "light rain sound and distant traffic.",
    "Close-up of a violinist's hands, slow dolly-in, warm tungsten light; she plays a melancholic melody.",
    "镜头从高空俯拍一座雪山，随后缓缓下降，穿过云层，背景音乐是低沉的大提琴。",
    "夕暮れの海辺で、少年が凧を揚げている。波の音とカモメの鳴き声。",
    "Scene 1: INT. KITCHEN - DAY\nMARY (40s) chops onions.\nMARY: \"Where were you last night?\"",
]


def random_strings(n, seed):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " " * 8 + "\t\n\r",
        ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "あいうえおかきくけこアイウエオカキクケコ",
        "가나다라마바사아자차카타파하",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "αβγδεζηθικλμνξοπρστυφχψω",
        "éèêëàâäôöûüçñßøåæœ",
        "\u0300\u0301\u0302\u0303\u0308\u0323\u0327",
        "😀😂🥲😍🤔👍🙏🔥✨🎉❤️🐱🌧️",
        "\u200d\ufe0f\u200b\u00a0\u3000",
    ]
    out = []
    for _ in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55, 89])
        weights = [rng.random() for _ in pools]
        s = []
        for _ in range(length):
            pool = rng.choices(pools, weights)[0]
            s.append(rng.choice(pool))
        if rng.random() < 0.15:
            s.insert(rng.randrange(len(s) + 1), rng.choice(SPECIAL))
        if rng.random() < 0.1:
            s.insert(rng.randrange(len(s) + 1), " " * rng.randint(2, 40))
        out.append("".join(s))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tokenizer_corpus.py OUT.json")
    corpus = list(HAND) + [f"{t}" for t in SPECIAL]
    corpus += [f"x{t}y" for t in SPECIAL] + [f" {t} " for t in SPECIAL[:6]]
    corpus += random_strings(340, 20261202)
    seen, unique = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    for s in unique:
        s.encode("utf-8")  # every entry must be valid UTF-8 (no lone surrogates)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(unique, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {sys.argv[1]}: {len(unique)} strings")


if __name__ == "__main__":
    main()
