// BytePairEncoding: see bpe.h.
#include "runtime/data/tokenizer/bpe.h"

#include <queue>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/data/tokenizer/pretokenizer.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

// Byte-level text (each character a stand-in for one byte) -> raw bytes.
bool ByteLevelToBytes(absl::string_view text, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < text.size()) {
    const int b = ByteLevelByte(NextCodePoint(text, &i));
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace

absl::StatusOr<BytePairEncoding> BytePairEncoding::FromJson(const json& model, bool byte_level) {
  if (model.value("type", "BPE") != "BPE") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.type \"%s\" is not supported (BPE)", Echo(model.value("type", ""))));
  }
  if (!model.value("dropout", json()).is_null() && model.at("dropout").get<double>() != 0) {
    return absl::InvalidArgumentError("model.dropout is not supported");
  }
  const bool byte_fallback = model.value("byte_fallback", false);
  if (byte_fallback && byte_level) {
    return absl::InvalidArgumentError(
        "model.byte_fallback with a ByteLevel pre-tokenizer is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() && !model.at(key).get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("model.%s is not supported", key));
    }
  }
  BytePairEncoding bpe;
  bpe.byte_level_ = byte_level;
  bpe.byte_fallback_ = byte_fallback;
  bpe.fuse_unk_ = model.value("fuse_unk", false);
  bpe.ignore_merges_ = model.value("ignore_merges", false);
  // Byte-level keys are spelled in stand-in characters; SentencePiece-style keys are the
  // text itself.
  auto to_bytes = [byte_level](const std::string& key, std::string* out) {
    if (byte_level) return ByteLevelToBytes(key, out);
    *out = key;
    return true;
  };
  const json& vocab = model.at("vocab");
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrFormat("model.vocab[\"%s\"]: id %d", Echo(it.key()), id));
    }
    if (!to_bytes(it.key(), &bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.vocab[\"%s\"] is not byte-level text, which a tokenizer with a ByteLevel "
          "pre-tokenizer needs", Echo(it.key())));
    }
    if (id >= bpe.size()) bpe.id_to_bytes_.resize(id + 1);
    bpe.id_to_bytes_[id] = bytes;
    bpe.bytes_to_id_[bytes] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    bpe.byte_id_[b] = byte_level ? bpe.TokenId(std::string(1, static_cast<char>(b)))
                                 : bpe.TokenId(absl::StrFormat("<0x%02X>", b));
  }
  for (int c = 0; c < 128; ++c) bpe.ascii_id_[c] = bpe.TokenId(std::string(1, static_cast<char>(c)));
  if (!byte_level && model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = model.at("unk_token").get<std::string>();
    bpe.unk_id_ = bpe.TokenId(unk);
    if (bpe.unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model.unk_token \"%s\" is not in model.vocab", Echo(unk)));
    }
  }
  const json& merges = model.at("merges");
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrFormat("model.merges[%d] \"%s\" is not \"a b\"", rank, Echo(s)));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("model.merges[%d] is neither \"a b\" nor [a, b]", rank));
    }
    if (!to_bytes(a, &left) || !to_bytes(b, &right)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model.merges[%d] is not byte-level text", rank));
    }
    const int32_t ia = bpe.TokenId(left), ib = bpe.TokenId(right), im = bpe.TokenId(left + right);
    if (ia < 0 || ib < 0 || im < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.merges[%d] (%s %s): a part or the merged token is not in model.vocab", rank,
          Echo(a), Echo(b)));
    }
    // A repeated pair keeps its last rank, as the Hugging Face loader (a map collect) does.
    bpe.merges_[PairKey(ia, ib)] = Merge{static_cast<int32_t>(rank), im};
  }
  return bpe;
}

absl::string_view BytePairEncoding::TokenBytes(int32_t id) const {
  if (id < 0 || id >= size()) return {};
  return id_to_bytes_[id];
}

int32_t BytePairEncoding::TokenId(absl::string_view bytes) const {
  auto it = bytes_to_id_.find(bytes);
  return it == bytes_to_id_.end() ? -1 : it->second;
}

int BytePieceValue(absl::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int b = 0;
  for (char c : t.substr(3, 2)) {
    const int v = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (v < 0) return -1;
    b = b * 16 + v;
  }
  return b;
}

void BytePairEncoding::Encode(absl::string_view word, std::vector<int32_t>* out,
                              BpeCache* cache) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = TokenId(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (word.size() == 1 && byte_level_) {
    const int32_t id = byte_id_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (cache != nullptr) {
    if (const std::vector<int32_t>* hit = cache->Find(word)) {
      out->insert(out->end(), hit->begin(), hit->end());
      return;
    }
  }
  const size_t before = out->size();
  MergeWord(word, out);
  if (cache != nullptr && word.size() < 256) {
    cache->Insert(word, std::vector<int32_t>(out->begin() + before, out->end()));
  }
}

// Hugging Face's BPE::merge_word, the part before the merges.
void BytePairEncoding::InitialSymbols(absl::string_view word, std::vector<int32_t>* ids) const {
  if (byte_level_) {
    for (unsigned char c : word) {
      const int32_t id = byte_id_[c];
      if (id >= 0) ids->push_back(id);  // no entry and no unk token: the byte is dropped
    }
    return;
  }
  bool unk_pending = false;  // an unknown piece not yet added (fused with the next ones)
  size_t i = 0;
  while (i < word.size()) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    size_t next = i;
    int32_t id;
    if (c < 0x80) {
      next = i + 1;
      id = ascii_id_[c];
    } else {
      NextCodePoint(word, &next);
      id = TokenId(word.substr(i, next - i));
    }
    if (id >= 0) {
      if (unk_pending) ids->push_back(unk_id_);
      unk_pending = false;
      ids->push_back(id);
    } else {
      bool all_bytes = byte_fallback_;
      for (size_t k = i; all_bytes && k < next; ++k) {
        all_bytes = byte_id_[static_cast<unsigned char>(word[k])] >= 0;
      }
      if (all_bytes) {
        // As Hugging Face does, a pending unknown piece stays pending past these.
        for (size_t k = i; k < next; ++k) ids->push_back(byte_id_[static_cast<unsigned char>(word[k])]);
      } else if (unk_id_ >= 0) {
        if (unk_pending && !fuse_unk_) ids->push_back(unk_id_);
        unk_pending = true;
      }
    }
    i = next;
  }
  if (unk_pending) ids->push_back(unk_id_);
}

// Hugging Face's Word::merge_all: a heap of (rank, position) candidate merges; a popped
// candidate is dropped if its left symbol is gone or the pair there changed since.
void BytePairEncoding::MergeWord(absl::string_view word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<int32_t> initial;
  initial.reserve(word.size());
  InitialSymbols(word, &initial);
  std::vector<Symbol> sym;
  sym.reserve(initial.size());
  for (int32_t id : initial) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{id, n - 1, n + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    auto it = merges_.find(PairKey(sym[pos].id, sym[sym[pos].next].id));
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    auto it = merges_.find(PairKey(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.id != top.id) continue;
    Symbol& right = sym[left.next];
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    push(left.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace slidedp
