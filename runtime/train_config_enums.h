// The enumerations of TrainConfig (device, compute dtype, the token file's element type,
// the optimizer's schedule and moment dtype, and the policy's routes and placements),
// each with its one table of names. Job files, JSON, checkpoints and the API carry the names; the parser
// (train_config.cc, and the server's JobSpec translation) turns them into these enums,
// and no code past it compares the names. Plain data; no threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace slidedp {

// How a unit's parameters reach the workers (DESIGN.md, "Routes").
enum class ParamRoute { kReplicate, kScatterAllGather };
// How a unit's gradient reaches the host state.
enum class GradRoute { kGatherHost, kReduceScatter, kReduceOne };
// Where layer inputs wait between forward and backward; kAuto: host when one step's
// inputs would take more than 40% of the GPU's memory (ChooseActivations).
enum class ActivationPlacement { kAuto, kDevice, kHost };
// Where reduced gradients land in host memory; kAuto: bf16 on cuda where the devices
// reduce (LandsInBf16).
enum class GradLanding { kAuto, kFp32, kBf16 };

// The device the workers compute on.
enum class DeviceKind { kCpu, kCuda };
// How AdamW's m and v are kept in host memory (optimizer.state_dtype,
// runtime/state/moment_codec.h); the update's math is fp32 in every case.
enum class MomentDtype { kFp32, kBf16, kInt8 };

// The dtype of the workers' compute (master weights are fp32 on the host); bf16 always
// on cuda.
enum class ComputeDtype { kFp32, kBf16 };

// The element type of a raw token file (data.format tokens; llm.c files say their own).
enum class TokenDtype { kUint16, kUint32 };
// The learning rate after warmup (optimizer.schedule, runtime/state/lr_schedule.h).
enum class LrScheduleKind { kConstant, kLinear, kCosine };

// data.format (DataConfig): where the training tokens come from.
enum class DataFormat { kSynthetic, kTokens, kJsonl, kText, kPromptCompletion, kChat };

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The tables, in the order that messages list the names.
inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}};
inline constexpr EnumName<ComputeDtype> kComputeDtypeNames[] = {{ComputeDtype::kFp32, "fp32"},
                                                                {ComputeDtype::kBf16, "bf16"}};
inline constexpr EnumName<ParamRoute> kParamRouteNames[] = {
    {ParamRoute::kReplicate, "replicate"}, {ParamRoute::kScatterAllGather, "scatter_allgather"}};
inline constexpr EnumName<GradRoute> kGradRouteNames[] = {{GradRoute::kGatherHost, "gather_host"},
                                                          {GradRoute::kReduceScatter, "reduce_scatter"},
                                                          {GradRoute::kReduceOne, "reduce_one"}};
inline constexpr EnumName<ActivationPlacement> kActivationPlacementNames[] = {
    {ActivationPlacement::kDevice, "device"},
    {ActivationPlacement::kHost, "host"},
    {ActivationPlacement::kAuto, "auto"}};
inline constexpr EnumName<MomentDtype> kMomentDtypeNames[] = {
    {MomentDtype::kFp32, "fp32"}, {MomentDtype::kBf16, "bf16"}, {MomentDtype::kInt8, "int8"}};
inline constexpr EnumName<GradLanding> kGradLandingNames[] = {
    {GradLanding::kAuto, "auto"}, {GradLanding::kFp32, "fp32"}, {GradLanding::kBf16, "bf16"}};
inline constexpr EnumName<TokenDtype> kTokenDtypeNames[] = {{TokenDtype::kUint16, "uint16"},
                                                            {TokenDtype::kUint32, "uint32"}};
inline constexpr EnumName<DataFormat> kDataFormatNames[] = {
    {DataFormat::kSynthetic, "synthetic"}, {DataFormat::kTokens, "tokens"},
    {DataFormat::kJsonl, "jsonl"},         {DataFormat::kText, "text"},
    {DataFormat::kPromptCompletion, "prompt_completion"}, {DataFormat::kChat, "chat"}};
inline constexpr EnumName<LrScheduleKind> kLrScheduleKindNames[] = {
    {LrScheduleKind::kConstant, "constant"}, {LrScheduleKind::kLinear, "linear"}, {LrScheduleKind::kCosine, "cosine"}};

constexpr const auto& NamesOf(DeviceKind) { return kDeviceKindNames; }
constexpr const auto& NamesOf(ComputeDtype) { return kComputeDtypeNames; }
constexpr const auto& NamesOf(ParamRoute) { return kParamRouteNames; }
constexpr const auto& NamesOf(GradRoute) { return kGradRouteNames; }
constexpr const auto& NamesOf(ActivationPlacement) { return kActivationPlacementNames; }
constexpr const auto& NamesOf(GradLanding) { return kGradLandingNames; }
constexpr const auto& NamesOf(MomentDtype) { return kMomentDtypeNames; }
constexpr const auto& NamesOf(TokenDtype) { return kTokenDtypeNames; }
constexpr const auto& NamesOf(DataFormat) { return kDataFormatNames; }
constexpr const auto& NamesOf(LrScheduleKind) { return kLrScheduleKindNames; }

// The name of `value`; "" for a value outside the table (a cast).
template <typename E>
constexpr const char* NameOf(E value) {
  for (const EnumName<E>& e : NamesOf(E{})) {
    if (e.value == value) return e.name;
  }
  return "";
}

// The value named `name`; nullopt for a name outside the table.
template <typename E>
std::optional<E> EnumFromName(std::string_view name) {
  for (const EnumName<E>& e : NamesOf(E{})) {
    if (std::string_view(e.name) == name) return e.value;
  }
  return std::nullopt;
}

// "a, b, c": the names, for messages.
template <typename E>
std::string EnumNameList() {
  std::string out;
  for (const EnumName<E>& e : NamesOf(E{})) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

// The formats of text (JSON lines tokenized with data.tokenizer, runtime/data/text_records.h).
constexpr bool IsTextData(DataFormat f) {
  return f == DataFormat::kText || f == DataFormat::kPromptCompletion || f == DataFormat::kChat;
}

// Whether `route` with `world` workers gives each device the reduced gradient (or its
// slice of it), so that the device computes the norm and the host receives the final
// values: then the gradient may land in bf16 in the streamed copy. gather_host with
// several workers sums on the host and needs the fp32 gradient buffer.
constexpr bool DeviceReducesGradient(GradRoute route, int world) {
  return world == 1 || route != GradRoute::kGatherHost;
}

// Whether gradients land in bf16 in the streamed copy: asked for, or kAuto on cuda with
// a route whose devices reduce. Several hosts then reduce-scatter the bf16 gradients
// (summed in fp32, rounded once). (Trainer::Create refuses bf16 where it cannot be.)
constexpr bool LandsInBf16(GradLanding landing, GradRoute route, bool cuda, int world) {
  return landing == GradLanding::kBf16 ||
         (landing == GradLanding::kAuto && cuda && DeviceReducesGradient(route, world));
}

}  // namespace slidedp
