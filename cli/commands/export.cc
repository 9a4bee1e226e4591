// `dtrain export`: a checkpoint of any layout (its shards reassembled into the serial state)
// written as a Hugging Face folder (GPT-2 or Llama, by the family), model.safetensors +
// config.json. Parsing only.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command_registry.h"
#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/formats/hf_folder.h"
#include "file_roles.h"

namespace dtrain::cli {
namespace {

struct ExportFlags {
  std::string checkpoint, output;
  std::string format = "safetensors";
  std::string dtype = "f32";
  bool json = false;
};

void add_export(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint (saved by any layout) as a Hugging Face folder: model.safetensors in "
      "GPT-2's names and layouts (GPT2LMHeadModel), or Llama's (LlamaForCausalLM) for a "
      "--family llama checkpoint (MixtralForCausalLM with --experts), and config.json "
      "(docs/export.md)");
  cmd->add_option("--checkpoint", f->checkpoint,
                  "Checkpoint directory, or a --save root (its latest checkpoint)")
      ->required();
  cmd->add_option("--output", f->output, "Folder to write (made if missing)")->required();
  cmd->add_option("--format", f->format, "Output format: safetensors")
      ->check(CLI::IsMember({"safetensors"}))
      ->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "Stored dtype: f32 (exact) or bf16 (rounded to nearest)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print what was written as JSON");
  cmd->callback([f, cmd] {
    refuse_outputs_that_are_inputs(*cmd, {{"--checkpoint", f->checkpoint}},
                                   {{"--output", f->output}});
    DTRAIN_CHECK(std::filesystem::is_directory(f->checkpoint), "--checkpoint ", f->checkpoint,
                 ": no such directory");
    const checkpoint::LoadedCheckpoint c =
        checkpoint::load_checkpoint(f->checkpoint, "--checkpoint");
    // Refused before --output is made: a failed export leaves no empty folder behind.
    formats::check_exportable(c.state.model, str("--checkpoint ", c.dir));
    check_output_directory(f->output, "--output");
    const auto dtype =
        f->dtype == "bf16" ? formats::SafetensorsDtype::bf16 : formats::SafetensorsDtype::f32;
    formats::export_hf(c.state, f->output, dtype, "--output");
    const std::string weights =
        (std::filesystem::path(f->output) / formats::kHfWeightsName).string();
    if (f->json) {
      const nlohmann::json out = {{"checkpoint", c.dir},
                                  {"step", c.manifest.position.step},
                                  {"layout", describe(c.manifest.layout)},
                                  {"model", model::describe(c.state.model)},
                                  {"weights", weights},
                                  {"bytes", std::filesystem::file_size(weights)},
                                  {"dtype", f->dtype}};
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << "exported " << c.dir << " (step " << c.manifest.position.step << ", "
                << describe(c.manifest.layout) << ", " << model::describe(c.state.model) << ") to "
                << f->output << ": " << formats::kHfWeightsName << " ("
                << std::filesystem::file_size(weights) << " bytes, " << f->dtype << "), "
                << formats::kHfConfigName << "\n";
    }
  });
}

const CommandRegistration kRegistration("", add_export);

}  // namespace
}  // namespace dtrain::cli
