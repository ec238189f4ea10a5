// trained_export: the export end to end. Trains a model (default the "tiny" preset, on
// synthetic tokens) for a few steps with the engine on the CPU in fp32, writes it as a
// Hugging Face directory (Trainer::ExportHf) to OUT/model, reads the export back with our
// reader (its weights digest must equal the trainer's: the export is bit-exact), and
// writes our forward's logits for fixed input ids to OUT/ours.safetensors ("input_ids"
// as F32, "logits"), for tests/reference/check_trained_export.py to compare with
// transformers. MODEL may be a model directory; when it holds a tokenizer.json (e.g.
// ../shared/models/stories260K) the fine-tune runs on a short text with that tokenizer,
// the export carries the tokenizer, and our greedy continuation of a prompt goes to
// ours.safetensors too ("prompt_ids", "greedy": prompt and new ids) for the check to
// compare with transformers' generate. Exit code 0 on success. Run by
// tests/reference/check_trained_export.sh.
//   trained_export OUT [MODEL] [STEPS]
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/full_model.h"
#include "runtime/model/safetensors.h"
#include "runtime/state/host_state.h"

using namespace slidedp;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::cerr << "usage: trained_export OUT [MODEL=tiny] [STEPS=20]\n";
    return 2;
  }
  const std::string out = argv[1];
  TrainConfig c;
  c.model = argc > 2 ? argv[2] : "tiny";
  c.steps = argc > 3 ? std::stoll(argv[3]) : 20;
  c.seq_len = 64;
  c.micro_batch_size = 2;
  c.optimizer.lr = 3e-3;
  c.optimizer.warmup_steps = 2;
  const bool text = std::filesystem::exists(c.model + "/tokenizer.json");
  if (text) {  // a story in TinyStories' style, not in the model's training text
    std::filesystem::create_directories(out);
    std::ofstream train(out + "/train.jsonl");
    for (int i = 0; i < 40; ++i) {
      train << R"({"text": "Ben had a blue kite. The wind was strong and the kite flew up high. Ben )"
            << R"(laughed and ran after it. His dog Max ran too. They were very happy."})" << "\n";
    }
    c.data.format = DataFormat::kText;
    c.data.path = out + "/train.jsonl";
    c.data.cache_dir = out + "/cache";
  }
  auto trainer = Trainer::Create(c);
  if (!trainer.ok()) { std::cerr << trainer.status() << "\n"; return 1; }
  double loss = 0;
  for (int64_t s = 0; s < c.steps; ++s) {
    auto st = (*trainer)->Step();
    if (!st.ok()) { std::cerr << st.status() << "\n"; return 1; }
    loss = st->loss;
  }
  const std::string digest = (*trainer)->WeightsDigest();
  const std::string dir = out + "/model";
  if (absl::Status s = (*trainer)->ExportHf(dir); !s.ok()) { std::cerr << s << "\n"; return 1; }
  const ModelConfig model = (*trainer)->model_config();
  trainer->reset();

  HostState state(model, at::kFloat, 0, false);
  if (absl::Status s = state.LoadHf(dir); !s.ok()) { std::cerr << s << "\n"; return 1; }
  if (state.MasterDigest() != digest) {
    std::cerr << "the export reads back as " << state.MasterDigest() << ", trained " << digest << "\n";
    return 1;
  }
  const int64_t B = 2, T = 48;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> tok(0, model.vocab_size - 1);
  at::Tensor ids = at::empty({B, T}, at::kLong);
  for (int64_t i = 0; i < B * T; ++i) ids.data_ptr<int64_t>()[i] = tok(rng);
  std::vector<at::Tensor> flats;
  for (int u = 0; u < state.num_units(); ++u) flats.push_back(state.unit(u).master);
  at::Tensor logits = FullModelLogits(model, state.layout(), flats, ids).contiguous();
  at::Tensor ids_f = ids.to(at::kFloat).contiguous();
  std::vector<TensorToWrite> tensors = {
      {"input_ids", SafetensorsDtype::kF32, {B, T}, ids_f.data_ptr<float>()},
      {"logits", SafetensorsDtype::kF32, {B, T, model.vocab_size}, logits.data_ptr<float>()}};
  // Greedy decoding with our forward on the export, from the export's own tokenizer.
  std::vector<float> prompt_f, greedy_f;
  if (text) {
    auto tok = Tokenizer::Load(dir);
    if (!tok.ok()) { std::cerr << "the export's tokenizer: " << tok.status() << "\n"; return 1; }
    std::vector<int32_t> seq = (*tok)->Encode("Once upon a time", /*add_special_tokens=*/true);
    prompt_f.assign(seq.begin(), seq.end());
    for (int k = 0; k < 40; ++k) {
      at::Tensor input = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong)
                             .reshape({1, static_cast<int64_t>(seq.size())});
      seq.push_back(static_cast<int32_t>(FullModelLogits(model, state.layout(), flats, input)[0][-1].argmax().item<int64_t>()));
    }
    greedy_f.assign(seq.begin(), seq.end());
    std::cout << "greedy: " << (*tok)->Decode(seq, /*skip_special_tokens=*/true) << "\n";
    tensors.push_back({"prompt_ids", SafetensorsDtype::kF32, {static_cast<int64_t>(prompt_f.size())}, prompt_f.data()});
    tensors.push_back({"greedy", SafetensorsDtype::kF32, {static_cast<int64_t>(greedy_f.size())}, greedy_f.data()});
  }
  absl::Status w = WriteSafetensors(out + "/ours.safetensors", tensors,
      {{"weights_digest", digest}, {"model", c.model}, {"steps", std::to_string(c.steps)}});
  if (!w.ok()) { std::cerr << w << "\n"; return 1; }
  std::cout << "trained " << c.model << " for " << c.steps << " steps (last loss " << loss << "), digest "
            << digest << "; export " << dir << " reads back bit-exactly; logits in " << out
            << "/ours.safetensors\n";
  return 0;
}
