// BPE merging over one pre-token: HF tokenizers' Word::merge_all (models/bpe/word.rs), so ties
// and stale queue entries resolve exactly as the reference does.
#include <queue>

#include "models/tokenizer_impl.h"

namespace octet::tokenizer_detail {

void MergeTable::add(int32_t left, int32_t right, int32_t merged) {
  map_[key(left, right)] = Merge{next_rank_++, merged};
}

void MergeTable::apply(std::vector<int32_t>& ids) const {
  const int32_t n = int32_t(ids.size());
  if (n < 2 || map_.empty()) return;

  // Doubly linked list over the symbols; a merged-away symbol is marked dead.
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[size_t(i)] = {ids[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1, true};

  // Candidate merge of the pair starting at `pos`; lowest rank first, then leftmost.
  struct Candidate {
    int32_t rank, pos, merged;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  auto consider = [&](int32_t pos) {
    const Symbol& a = sym[size_t(pos)];
    if (a.next < 0) return;
    const auto it = map_.find(key(a.id, sym[size_t(a.next)].id));
    if (it != map_.end()) queue.push({it->second.rank, pos, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& a = sym[size_t(top.pos)];
    if (!a.alive || a.next < 0) continue;
    Symbol& b = sym[size_t(a.next)];
    // A stale entry: the pair at pos changed since it was queued.
    const auto it = map_.find(key(a.id, b.id));
    if (it == map_.end() || it->second.merged != top.merged) continue;

    a.id = top.merged;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) sym[size_t(b.next)].prev = top.pos;
    if (a.prev >= 0) consider(a.prev);
    consider(top.pos);
  }

  ids.clear();
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) ids.push_back(sym[size_t(i)].id);
}

}  // namespace octet::tokenizer_detail
