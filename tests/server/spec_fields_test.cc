// The field list (runtime/train_config_fields.h) and job.proto name the same fields,
// both ways, except those listed in kFieldsNotInJobSpec; the derived translation keeps
// every value and refuses an unknown enumeration name naming the field.
#include "server/spec_fields.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "google/protobuf/descriptor.h"
#include "runtime/train_config_fields.h"
#include "server/spec_translation.h"

namespace slidedp::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Every field of `message` and its nested messages, by full name ("optimizer.lr").
void ProtoFieldNames(const Descriptor* message, const std::string& prefix, std::set<std::string>* out) {
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* f = message->field(i);
    const std::string name = prefix + f->name();
    out->insert(name);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) ProtoFieldNames(f->message_type(), name + ".", out);
  }
}

TEST(SpecFieldsTest, TheProtoAndTheFieldListNameTheSameFields) {
  std::set<std::string> proto;
  ProtoFieldNames(v1::JobSpec::descriptor(), "", &proto);
  std::set<std::string> list;
  for (const std::string& name : TrainConfigFieldNames(/*sections=*/true)) list.insert(name);
  for (const std::string& name : list) {
    if (IsFieldNotInJobSpec(name)) {
      EXPECT_EQ(proto.count(name), 0u) << name << " is in job.proto: take it off kFieldsNotInJobSpec";
    } else {
      EXPECT_EQ(proto.count(name), 1u) << name << " is in TrainConfig's field list but not in JobSpec (job.proto); "
                                       << "add it there, or to kFieldsNotInJobSpec (server/spec_fields.h) with why";
    }
  }
  for (const std::string& name : proto) {
    EXPECT_EQ(list.count(name), 1u) << name << " is in JobSpec (job.proto) but not in TrainConfig's field list "
                                    << "(runtime/train_config_fields.h)";
  }
  for (const FieldNotInSpec& f : kFieldsNotInJobSpec) {
    EXPECT_EQ(list.count(f.name), 1u) << f.name << " of kFieldsNotInJobSpec is no field of TrainConfig";
  }
}

// The fields that SpecTranslationTest.RoundTripKeepsEveryField leaves at their
// defaults, away from them, through the spec and back.
TEST(SpecFieldsTest, ThePolicyAndTheRestSurviveTheRoundTrip) {
  TrainConfig c;
  c.data.token_dtype = TokenDtype::kUint32;
  c.data.shuffle = false;
  c.optimizer = {1e-3, 0.2, 4, LrScheduleKind::kLinear, 0.8, 0.9, 1e-6, 0.01, 0.5};
  c.checkpoint_dir = "/ck";
  c.max_bad_steps = 7;
  c.output_dir = "/out";
  c.policy.prefetch_depth = 3;
  c.policy.param_route = ParamRoute::kScatterAllGather;
  c.policy.grad_route = GradRoute::kReduceOne;
  c.policy.activations = ActivationPlacement::kHost;
  c.policy.loss_chunk_tokens = 512;
  c.policy.mlp_tile_tokens = 256;
  c.policy.update_threads = 3;
  c.policy.auto_plan = true;
  c.policy.gpu_memory_budget_bytes = int64_t{1} << 33;
  c.policy.replan_threshold = 0.3;
  absl::Status status;
  const v1::JobSpec spec = ConfigToSpec(c);
  EXPECT_EQ(TrainConfigToJson(SpecToConfig(spec, &status)), TrainConfigToJson(c));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(spec.policy().grad_route(), "reduce_one") << "the API carries the names";
  EXPECT_EQ(spec.policy().activations(), "host");
}

TEST(SpecFieldsTest, AnUnknownNameIsRefusedNamingTheFieldAndAnUnsetFieldTakesTheDefault) {
  v1::JobSpec spec;
  spec.mutable_policy()->set_param_route("broadcast");
  spec.set_seq_len(64);
  absl::Status status;
  const TrainConfig c = SpecToConfig(spec, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("field 'policy.param_route' must be one of replicate, scatter_allgather; got "
                                  "'broadcast'"),
            std::string::npos)
      << status;
  EXPECT_EQ(c.policy.param_route, ParamRoute::kReplicate) << "the default stays";
  EXPECT_EQ(c.seq_len, 64);
  EXPECT_EQ(c.micro_batch_size, TrainConfig().micro_batch_size);
}

TEST(SpecFieldsTest, TheSpecAsSubmittedShowsTheDefaultsAndKeepsWhatWasGiven) {
  v1::JobSpec spec;
  spec.set_model("/models/../models/q");
  spec.mutable_optimizer()->set_lr(0.5);
  const v1::JobSpec shown = SpecAsSubmitted(spec);
  EXPECT_EQ(shown.model(), "/models/../models/q") << "as given";
  EXPECT_EQ(shown.optimizer().lr(), 0.5);
  EXPECT_TRUE(shown.has_micro_batch_size());
  EXPECT_EQ(shown.micro_batch_size(), TrainConfig().micro_batch_size);
  EXPECT_EQ(shown.optimizer().beta2(), TrainConfig().optimizer.beta2);
  EXPECT_EQ(shown.policy().grad_route(), "gather_host");
}

}  // namespace
}  // namespace slidedp::server
