// The fixture recorder (src/gpu/cupti/recorder.cpp): each line is one JSON object that
// tests/gpu/gpu_replay.py reads back, strings from the program included.
#include "gpu/cupti/recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

std::vector<nlohmann::json> read_lines(const std::string &path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Recorder, WritesOneJsonObjectPerEventWithThePathAndRecords) {
  const dctx_frame py{DCTX_FRAME_PYTHON, "step", "dir \"a\"/train.py", 12, ""};
  const dctx_frame op{DCTX_FRAME_OPERATOR, "aten::mm", "", 0, "torch"};
  const dctx_node node = dctx_child(dctx_child(0, dctx_frame_id(&py)), dctx_frame_id(&op));
  const std::string path = testing::TempDir() + "/rec-" + std::to_string(getpid()) + ".jsonl";
  {
    dctx::gpu::Recorder rec(path.c_str(), [](uint32_t ordinal, dctx_gpu_device *d) {
      d->ordinal = ordinal;
      std::strcpy(d->name, "NVIDIA H100 80GB HBM3");
      d->sm_count = 132;
      d->total_mem = 85'000'000'000ULL;
      return true;
    });
    rec.api_enter("cudaLaunchKernel", 1, 7, true, node, 1000);
    rec.api_exit(1500, false);
    // A kernel name with a quote, a control character and a byte that is not UTF-8.
    dctx_gpu_activity r{};
    r.kind = DCTX_GPU_KERNEL;
    r.correlation = 7;
    r.start = 2000;
    r.end = 2600;
    r.device = 0;
    r.grid[0] = 80;
    r.block[0] = 256;
    r.dynamic_smem = -1;
    r.name = "k<\"x\">\t\xff";
    rec.buffer(&r, 1, 3);
    rec.window(true, 5000, 10);
  }
  const std::vector<nlohmann::json> ev = read_lines(path);
  std::remove(path.c_str());
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0]["e"], "api");
  EXPECT_EQ(ev[0]["api"], "cudaLaunchKernel");
  EXPECT_EQ(ev[0]["tid"], static_cast<uint64_t>(gettid()));
  EXPECT_EQ(ev[0]["corr"], 7);
  EXPECT_EQ(ev[0]["t"], 1000);
  const nlohmann::json want_path = {{DCTX_FRAME_PYTHON, "step", "dir \"a\"/train.py", 12, ""},
                                    {DCTX_FRAME_OPERATOR, "aten::mm", "", 0, "torch"}};
  EXPECT_EQ(ev[0]["path"], want_path);
  EXPECT_EQ(ev[1]["e"], "exit");
  EXPECT_EQ(ev[1]["failed"], 0);
  // The device line comes before the first buffer that names the device.
  EXPECT_EQ(ev[2]["e"], "device");
  EXPECT_EQ(ev[2]["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(ev[2]["sm_count"], 132);
  EXPECT_EQ(ev[2]["total_mem"], 85'000'000'000ULL);
  EXPECT_EQ(ev[3]["e"], "buffer");
  EXPECT_EQ(ev[3]["dropped"], 3);
  ASSERT_EQ(ev[3]["records"].size(), 1u);
  const nlohmann::json &k = ev[3]["records"][0];
  EXPECT_EQ(k["kind"], DCTX_GPU_KERNEL);
  EXPECT_EQ(k["end"], 2600);
  EXPECT_EQ(k["grid"], nlohmann::json({80, 0, 0}));
  EXPECT_EQ(k["block"], nlohmann::json({256, 0, 0}));
  EXPECT_EQ(k["dynamic_smem"], -1);
  EXPECT_EQ(k["name"], "k<\"x\">\t\xEF\xBF\xBD");  // the stray byte became U+FFFD
  EXPECT_EQ(ev[4], nlohmann::json({{"e", "window"}, {"open", 1}, {"t", 5000}, {"scale", 10}}));
}

}  // namespace
