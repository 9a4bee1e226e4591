// Parsing --inject-fault and firing it at the chosen rank and step.
#include "dtrain/run/fault.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <new>
#include <utility>

#include "dtrain/comm/communicator.h"
#include "dtrain/core/check.h"

namespace dtrain::train {
namespace {

// Each kind's spelling in --inject-fault.
constexpr std::array<std::pair<FaultKind, std::string_view>, 3> kKindNames = {{
    {FaultKind::throw_error, "throw"},
    {FaultKind::exit_rank, "exit"},
    {FaultKind::bad_alloc, "bad_alloc"},
}};
constexpr std::string_view kExpected = "rank=R,step=S,kind=throw|exit|bad_alloc";

std::string_view kind_name(FaultKind kind) {
  for (const auto& [k, spelling] : kKindNames) {
    if (k == kind) return spelling;
  }
  return "?";
}

int64_t parse_number(std::string_view key, std::string_view value, std::string_view text) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
  DTRAIN_CHECK(ec == std::errc() && end == value.data() + value.size() && x >= 0,
               "--inject-fault \"", text, "\": ", key, "=", value,
               " is not a non-negative integer");
  return x;
}

}  // namespace

FaultSpec parse_fault(std::string_view text) {
  FaultSpec f;
  bool has_rank = false, has_step = false, has_kind = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = part.find('=');
    DTRAIN_CHECK(eq != std::string_view::npos, "--inject-fault \"", text, "\": \"", part,
                 "\" is not key=value (expected ", kExpected, ")");
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "rank") {
      f.rank = static_cast<int>(parse_number(key, value, text));
      has_rank = true;
    } else if (key == "step") {
      f.step = parse_number(key, value, text);
      DTRAIN_CHECK(f.step >= 1, "--inject-fault \"", text, "\": step must be at least 1");
      has_step = true;
    } else if (key == "kind") {
      const auto found = std::find_if(kKindNames.begin(), kKindNames.end(),
                                      [&](const auto& k) { return k.second == value; });
      DTRAIN_CHECK(found != kKindNames.end(), "--inject-fault \"", text, "\": kind \"", value,
                   "\" is not throw, exit or bad_alloc");
      f.kind = found->first;
      has_kind = true;
    } else {
      throw Error(str("--inject-fault \"", text, "\": unknown key \"", key,
                      "\" (expected rank, step and kind)"));
    }
  }
  DTRAIN_CHECK(has_rank && has_step && has_kind, "--inject-fault \"", text, "\": needs ",
               kExpected);
  return f;
}

std::string describe(const FaultSpec& f) {
  return str("rank=", f.rank, ",step=", f.step, ",kind=", kind_name(f.kind));
}

void inject_fault_if_due(const std::optional<FaultSpec>& fault, int rank, int64_t step) {
  if (!fault || fault->rank != rank || fault->step != step) return;
  const std::string what = str("injected fault (--inject-fault ", describe(*fault), "): rank ",
                               rank, " fails before step ", step);
  switch (fault->kind) {
    case FaultKind::exit_rank:
      throw comm::RankExited(what);
    case FaultKind::bad_alloc:
      // What an allocation past a memory limit throws: std::bad_alloc carries no message, so the
      // run's out-of-memory path, not this text, is what the user reads.
      throw std::bad_alloc();
    case FaultKind::throw_error:
      break;
  }
  throw Error(what);
}

}  // namespace dtrain::train
