// Payload preview for dead letters: JSON pretty-printed, UTF-8 text as is, anything
// else as a hex dump. Bounded: at most `maxBytes` of the payload are rendered.

export type PayloadKind = "empty" | "json" | "text" | "binary";

export interface PayloadPreview {
  kind: PayloadKind;
  text: string;
  /** Bytes of the whole payload. */
  totalBytes: number;
  /** Bytes the preview covers (<= totalBytes). */
  shownBytes: number;
  truncated: boolean;
}

export const PREVIEW_MAX_BYTES = 4096;
const HEX_ROW = 16;

/** Bytes 0x00-0x1f other than tab, LF and CR (and DEL) mark a payload as binary. */
function hasControl(s: string): boolean {
  // eslint-disable-next-line no-control-regex
  return /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/.test(s);
}

/**
 * Decodes UTF-8 that may be cut in the middle of a character at the end (a prefix
 * of a longer payload). Returns null when the bytes are not UTF-8.
 */
function decodePrefix(bytes: Uint8Array, cut: boolean): { text: string; used: number } | null {
  const dec = new TextDecoder("utf-8", { fatal: true });
  // A cut can split one character of at most 4 bytes: drop up to 3 trailing bytes.
  const tries = cut ? 4 : 1;
  for (let drop = 0; drop < tries && drop <= bytes.length; drop++) {
    try {
      const used = bytes.length - drop;
      return { text: dec.decode(bytes.subarray(0, used)), used };
    } catch {
      /* try one byte shorter */
    }
  }
  return null;
}

export function hexDump(bytes: Uint8Array): string {
  const lines: string[] = [];
  for (let off = 0; off < bytes.length; off += HEX_ROW) {
    const row = bytes.subarray(off, off + HEX_ROW);
    let hex = "";
    let ascii = "";
    for (let i = 0; i < HEX_ROW; i++) {
      if (i < row.length) {
        hex += row[i].toString(16).padStart(2, "0") + " ";
        ascii += row[i] >= 0x20 && row[i] < 0x7f ? String.fromCharCode(row[i]) : ".";
      } else {
        hex += "   ";
      }
      if (i === 7) hex += " ";
    }
    lines.push(`${off.toString(16).padStart(8, "0")}  ${hex} |${ascii}|`);
  }
  return lines.join("\n");
}

export function previewPayload(bytes: Uint8Array, maxBytes: number = PREVIEW_MAX_BYTES): PayloadPreview {
  const totalBytes = bytes.length;
  if (totalBytes === 0) return { kind: "empty", text: "", totalBytes, shownBytes: 0, truncated: false };
  const cut = totalBytes > maxBytes;
  const head = cut ? bytes.subarray(0, maxBytes) : bytes;
  const decoded = decodePrefix(head, cut);
  if (decoded !== null && !hasControl(decoded.text)) {
    if (!cut) {
      const trimmed = decoded.text.trim();
      if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
        try {
          const pretty = JSON.stringify(JSON.parse(trimmed), null, 2);
          return { kind: "json", text: pretty, totalBytes, shownBytes: totalBytes, truncated: false };
        } catch {
          /* not JSON: show as text */
        }
      }
    }
    return { kind: "text", text: decoded.text, totalBytes, shownBytes: decoded.used, truncated: cut };
  }
  // Binary: a hex row is ~78 characters for 16 bytes, so show a quarter as many bytes.
  const hexBytes = Math.min(totalBytes, Math.max(HEX_ROW, Math.floor(maxBytes / 4)));
  return {
    kind: "binary",
    text: hexDump(bytes.subarray(0, hexBytes)),
    totalBytes,
    shownBytes: hexBytes,
    truncated: hexBytes < totalBytes,
  };
}
