/**
 * RFC 4648 base64 (standard alphabet, padded) without any platform dependency.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const DECODE = new Int16Array(256).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) DECODE[ALPHABET.charCodeAt(i)] = i;

/** Encodes bytes as padded base64. */
export function encodeBase64(bytes: Uint8Array): string {
  const parts: string[] = [];
  const CHUNK = 3 * 4096;
  for (let start = 0; start < bytes.length; start += CHUNK) {
    const end = Math.min(start + CHUNK, bytes.length);
    let s = '';
    let i = start;
    for (; i + 2 < end; i += 3) {
      const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
      s += ALPHABET[n >>> 18]! + ALPHABET[(n >>> 12) & 63]! + ALPHABET[(n >>> 6) & 63]! + ALPHABET[n & 63]!;
    }
    const rest = end - i;
    if (rest === 1) {
      const n = bytes[i]! << 16;
      s += ALPHABET[n >>> 18]! + ALPHABET[(n >>> 12) & 63]! + '==';
    } else if (rest === 2) {
      const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
      s += ALPHABET[n >>> 18]! + ALPHABET[(n >>> 12) & 63]! + ALPHABET[(n >>> 6) & 63]! + '=';
    }
    parts.push(s);
  }
  return parts.join('');
}

/** Decodes base64 (padding optional, ASCII whitespace ignored). Throws `TypeError` on invalid input. */
export function decodeBase64(text: string): Uint8Array {
  let clean = text.replace(/[\t\n\f\r ]+/g, '');
  if (clean.length % 4 === 0 && clean.endsWith('==')) clean = clean.slice(0, -2);
  else if (clean.length % 4 === 0 && clean.endsWith('=')) clean = clean.slice(0, -1);
  if (clean.length % 4 === 1) throw new TypeError('invalid base64: bad length');
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4));
  let o = 0;
  let i = 0;
  const sextet = (k: number): number => {
    const c = clean.charCodeAt(k);
    const v = c < 256 ? DECODE[c]! : -1;
    if (v < 0) throw new TypeError(`invalid base64 character at ${k}`);
    return v;
  };
  for (; i + 3 < clean.length; i += 4) {
    const n = (sextet(i) << 18) | (sextet(i + 1) << 12) | (sextet(i + 2) << 6) | sextet(i + 3);
    out[o++] = n >>> 16;
    out[o++] = (n >>> 8) & 255;
    out[o++] = n & 255;
  }
  const rest = clean.length - i;
  if (rest === 2) {
    const n = (sextet(i) << 18) | (sextet(i + 1) << 12);
    out[o++] = n >>> 16;
  } else if (rest === 3) {
    const n = (sextet(i) << 18) | (sextet(i + 1) << 12) | (sextet(i + 2) << 6);
    out[o++] = n >>> 16;
    out[o++] = (n >>> 8) & 255;
  }
  return out;
}
