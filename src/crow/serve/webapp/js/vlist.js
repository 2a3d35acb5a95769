// A virtualized list: only the entries on screen (and a margin) are in the DOM.
// Heights are measured once drawn (ResizeObserver) and estimated before; the
// spacer keeps the scrollbar right.  While the view is at the bottom it stays
// there as entries grow (a streaming reply), and leaves it when the person scrolls up.

const ESTIMATE = 72;
const MARGIN = 800; // pixels drawn above and below the screen

export class VirtualList {
  constructor(scroller, render) {
    this.scroller = scroller;
    this.render = render; // (item) -> Element
    this.items = [];
    this.heights = new Map(); // key -> px
    this.drawn = new Map(); // key -> {node, v}
    this.follow = true;
    this.spacer = document.createElement("div");
    this.spacer.className = "vlist-spacer";
    this.window = document.createElement("div");
    this.window.className = "vlist-window";
    this.spacer.append(this.window);
    scroller.replaceChildren(this.spacer);
    this.offsets = [0];
    this.dirtyOffsets = true;
    this.frame = 0;
    this.observer = new ResizeObserver((records) => {
      let changed = false;
      for (const record of records) {
        const key = record.target.dataset.key;
        const height = record.target.offsetHeight;
        if (key !== undefined && height && this.heights.get(key) !== height) {
          this.heights.set(key, height);
          changed = true;
        }
      }
      if (changed) {
        this.dirtyOffsets = true;
        this.schedule();
      }
    });
    this.lastTop = 0;
    scroller.addEventListener("scroll", () => {
      const top = scroller.scrollTop;
      const atBottom = scroller.scrollHeight - top - scroller.clientHeight < 40;
      if (top < this.lastTop - 2 && !atBottom) this.follow = false;
      else if (atBottom) this.follow = true;
      this.lastTop = top;
      this.schedule();
    }, { passive: true });
    new ResizeObserver(() => this.schedule()).observe(scroller);
  }

  setItems(items) {
    if (items !== this.items) {
      for (const drawn of this.drawn.values()) this.observer.unobserve(drawn.node);
      this.drawn.clear();
      this.heights.clear();
      this.window.replaceChildren();
      this.scroller.scrollTop = 0;
    }
    this.items = items;
    this.dirtyOffsets = true;
    this.schedule();
  }

  changed() {
    this.dirtyOffsets = true;
    this.schedule();
  }

  // While paused (a replay arriving), nothing is drawn: it is drawn once, at the end.
  pause(paused) {
    this.paused = paused;
    if (!paused) this.changed();
  }

  schedule() {
    if (this.paused) return;
    if (!this.frame) this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      if (!this.paused) this.draw(); // (asked for before the pause)
    });
  }

  computeOffsets() {
    const n = this.items.length;
    const offsets = new Array(n + 1);
    offsets[0] = 0;
    for (let i = 0; i < n; i++) offsets[i + 1] = offsets[i] + (this.heights.get(this.items[i].key) ?? ESTIMATE);
    this.offsets = offsets;
    this.dirtyOffsets = false;
  }

  indexAt(y) {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.offsets[mid + 1] <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  scrollToBottom() {
    this.follow = true;
    this.schedule();
  }

  draw() {
    if (this.dirtyOffsets) this.computeOffsets();
    const total = this.offsets[this.items.length];
    this.spacer.style.height = total + "px";
    const view = this.scroller.clientHeight || 600;
    let top = this.scroller.scrollTop;
    if (this.follow) top = Math.max(0, total - view);
    const first = this.indexAt(Math.max(0, top - MARGIN));
    const last = Math.min(this.items.length, this.indexAt(top + view + MARGIN) + 1);
    const keep = new Set();
    const nodes = [];
    for (let i = first; i < last; i++) {
      const item = this.items[i];
      keep.add(item.key);
      let drawn = this.drawn.get(item.key);
      if (!drawn || drawn.v !== item.v) {
        // A row of its own holds the entry's margins (display: flow-root), so its
        // measured height is all the room it takes.
        const node = document.createElement("div");
        node.className = "vrow";
        node.append(this.render(item));
        node.dataset.key = item.key;
        if (drawn) {
          this.observer.unobserve(drawn.node);
          if (drawn.node.parentNode) drawn.node.replaceWith(node);
        }
        this.observer.observe(node);
        drawn = { node, v: item.v };
        this.drawn.set(item.key, drawn);
      }
      nodes.push(drawn.node);
    }
    for (const [key, drawn] of this.drawn) {
      if (!keep.has(key)) {
        this.observer.unobserve(drawn.node);
        drawn.node.remove();
        this.drawn.delete(key);
      }
    }
    // Put the window's children in order, moving only those out of place.
    let cursor = this.window.firstChild;
    for (const node of nodes) {
      if (node === cursor) cursor = cursor.nextSibling;
      else this.window.insertBefore(node, cursor);
    }
    while (cursor) {
      const next = cursor.nextSibling;
      cursor.remove();
      cursor = next;
    }
    this.window.style.transform = `translateY(${this.offsets[first] || 0}px)`;
    // Measure what was drawn now, so the first frame already has true heights.
    let measuredChange = false;
    for (const node of nodes) {
      const h = node.offsetHeight;
      if (h && this.heights.get(node.dataset.key) !== h) {
        this.heights.set(node.dataset.key, h);
        measuredChange = true;
      }
    }
    if (measuredChange) {
      this.computeOffsets();
      this.spacer.style.height = this.offsets[this.items.length] + "px";
      this.window.style.transform = `translateY(${this.offsets[first] || 0}px)`;
    }
    if (this.follow) {
      const bottom = Math.max(0, this.offsets[this.items.length] - view);
      if (Math.abs(this.scroller.scrollTop - bottom) > 1) this.scroller.scrollTop = bottom;
      this.lastTop = this.scroller.scrollTop;
    }
  }
}
