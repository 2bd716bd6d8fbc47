// @vitest-environment node
import { describe, expect, test } from "vitest";
import { hexDump, previewPayload } from "../../src/payload";

const enc = (s: string) => new TextEncoder().encode(s);

describe("previewPayload", () => {
  test("pretty-prints JSON objects and arrays", () => {
    const p = previewPayload(enc('{"id":1,"tags":["a","b"]}'));
    expect(p.kind).toBe("json");
    expect(p.text).toBe('{\n  "id": 1,\n  "tags": [\n    "a",\n    "b"\n  ]\n}');
    expect(p.truncated).toBe(false);
    expect(previewPayload(enc(" [1, 2] ")).kind).toBe("json");
  });
  test("shows text that only looks like JSON as text", () => {
    const p = previewPayload(enc("{not json"));
    expect(p.kind).toBe("text");
    expect(p.text).toBe("{not json");
  });
  test("shows UTF-8 text as is, tabs and newlines included", () => {
    const p = previewPayload(enc("héllo\twörld\n✓"));
    expect(p.kind).toBe("text");
    expect(p.text).toBe("héllo\twörld\n✓");
    expect(p.totalBytes).toBe(enc("héllo\twörld\n✓").length);
  });
  test("a plain number or string is text, not JSON", () => {
    expect(previewPayload(enc("42")).kind).toBe("text");
  });
  test("dumps binary (invalid UTF-8 or control bytes) as hex", () => {
    const p = previewPayload(new Uint8Array([0x00, 0x01, 0x41, 0xff]));
    expect(p.kind).toBe("binary");
    expect(p.text).toBe("00000000  00 01 41 ff" + " ".repeat(39) + "|..A.|");
    expect(previewPayload(new Uint8Array([0xc3, 0x28])).kind).toBe("binary"); // invalid UTF-8
    expect(previewPayload(enc("bell\x07")).kind).toBe("binary");
  });
  test("is empty for an empty payload", () => {
    expect(previewPayload(new Uint8Array(0))).toMatchObject({ kind: "empty", text: "", totalBytes: 0 });
  });
  test("truncates long text at the limit, never inside a UTF-8 character", () => {
    const long = "é".repeat(3000); // 6000 bytes
    const p = previewPayload(enc(long), 4097);
    expect(p.kind).toBe("text");
    expect(p.truncated).toBe(true);
    expect(p.shownBytes).toBe(4096);
    expect(p.text).toBe("é".repeat(2048));
    expect(p.totalBytes).toBe(6000);
  });
  test("a long JSON document is shown as truncated text (it cannot be parsed whole)", () => {
    const doc = JSON.stringify({ items: Array.from({ length: 2000 }, (_, i) => i) });
    const p = previewPayload(enc(doc), 1024);
    expect(p.kind).toBe("text");
    expect(p.truncated).toBe(true);
    expect(p.text).toBe(doc.slice(0, 1024));
  });
  test("bounds the hex dump to a quarter of the limit in bytes", () => {
    const bin = new Uint8Array(10_000).map((_, i) => (i * 7) & 0xff);
    bin[0] = 0;
    const p = previewPayload(bin, 1024);
    expect(p.kind).toBe("binary");
    expect(p.shownBytes).toBe(256);
    expect(p.truncated).toBe(true);
    expect(p.text.split("\n")).toHaveLength(16);
  });
});

describe("hexDump", () => {
  test("prints offset, 16 bytes in two groups of 8, and ASCII", () => {
    const d = hexDump(enc("ABCDEFGHIJKLMNOPQ"));
    expect(d.split("\n")).toEqual([
      "00000000  41 42 43 44 45 46 47 48  49 4a 4b 4c 4d 4e 4f 50  |ABCDEFGHIJKLMNOP|",
      "00000010  51" + " ".repeat(48) + "|Q|",
    ]);
  });
});
