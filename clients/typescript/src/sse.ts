/**
 * A Server-Sent Events parser (the WHATWG "event stream interpretation"), fed with arbitrary
 * chunks of bytes: events, lines, and even UTF-8 sequences may be split across reads.
 */

/** One dispatched event. */
export interface SseEvent {
  /** The `event:` field, `message` when absent. */
  event: string;
  /** The `data:` lines joined with `\n`. */
  data: string;
  /** The last `id:` seen, if any. */
  id?: string;
}

/** Incremental parser: `push` bytes, get the complete events they finish; `end` flushes. */
export class SseParser {
  private readonly decoder = new TextDecoder('utf-8');
  private buffer = '';
  /** The previous chunk ended with `\r`: a `\n` starting the next one belongs to that line end. */
  private pendingCR = false;
  private eventType = '';
  private data: string[] = [];
  private hasData = false;
  private lastId: string | undefined;
  private first = true;

  /** Feeds bytes (or already decoded text); returns the events completed by them. */
  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    if (this.first && text.length > 0) {
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      this.first = false;
    }
    if (text.length === 0) return [];
    if (this.pendingCR) {
      if (text.startsWith('\n')) text = text.slice(1);
      this.pendingCR = false;
    }
    this.buffer += text;
    const events: SseEvent[] = [];
    let start = 0;
    for (;;) {
      const cr = this.buffer.indexOf('\r', start);
      const lf = this.buffer.indexOf('\n', start);
      let end: number;
      if (cr < 0 && lf < 0) break;
      if (cr < 0 || (lf >= 0 && lf < cr)) {
        end = lf;
        this.line(this.buffer.slice(start, end), events);
        start = end + 1;
      } else {
        end = cr;
        if (end + 1 === this.buffer.length) {
          // A CR at the very end: the line is over; a LF may follow in the next chunk.
          this.line(this.buffer.slice(start, end), events);
          start = end + 1;
          this.pendingCR = true;
          break;
        }
        this.line(this.buffer.slice(start, end), events);
        start = this.buffer.charCodeAt(end + 1) === 10 ? end + 2 : end + 1;
      }
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  /** Ends the stream. An event not closed by a blank line is discarded, as the spec says. */
  end(): SseEvent[] {
    const events = this.push(this.decoder.decode());
    this.buffer = '';
    this.data = [];
    this.hasData = false;
    this.eventType = '';
    return events;
  }

  private line(line: string, events: SseEvent[]): void {
    if (line === '') {
      if (this.hasData) {
        const ev: SseEvent = { event: this.eventType || 'message', data: this.data.join('\n') };
        if (this.lastId !== undefined) ev.id = this.lastId;
        events.push(ev);
      }
      this.data = [];
      this.hasData = false;
      this.eventType = '';
      return;
    }
    if (line.startsWith(':')) return; // comment (keep-alive)
    const colon = line.indexOf(':');
    let field: string;
    let value: string;
    if (colon < 0) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
    }
    switch (field) {
      case 'event':
        this.eventType = value;
        break;
      case 'data':
        this.data.push(value);
        this.hasData = true;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      default:
        break; // `retry` and unknown fields are ignored
    }
  }
}
