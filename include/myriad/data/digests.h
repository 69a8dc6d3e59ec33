// SHA-256 and HMAC-SHA256 as lowercase hex (OpenSSL), and hex <-> bytes: what the audit log (its
// chain and MACs), encrypted files (their ids) and the server's access policy (its key file, the
// remembered keys) compute.
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

#include "myriad/core/error.h"

namespace myriad::data {

inline std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

// The bytes of lowercase hex `hex`; throws naming `where` when it is not.
inline std::string from_hex(const std::string& hex, const std::string& where) {
  MYRIAD_CHECK(hex.size() % 2 == 0, where << " is not hex");
  auto digit = [&](char c) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    MYRIAD_CHECK(d >= 0, where << " is not lowercase hex");
    return d;
  };
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
  return out;
}

inline std::string sha256_hex(const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_sha256(), nullptr);
  return to_hex(out, n);
}

inline std::string hmac_sha256_hex(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &n);
  return to_hex(out, n);
}

}  // namespace myriad::data
