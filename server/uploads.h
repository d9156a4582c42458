#ifndef AMPD_SERVER_UPLOADS_H_
#define AMPD_SERVER_UPLOADS_H_

// Uploaded data sets belong to the principal that uploaded them: each has its
// own directory under DATA_ROOT/uploads/, and a job spec's "uploads/PATH"
// means PATH in the job owner's directory. Another principal's uploads are
// simply not there for a job (not found), and each directory has a quota.

#include <cstdint>
#include <string>

namespace ampd::server {

// DATA_ROOT/uploads/NAME, NAME being the principal if it is a plain file name
// ([A-Za-z0-9._-]), otherwise "x" + its hex bytes.
std::string UploadDir(const std::string& data_root, const std::string& principal);

// Where a job spec path lands: "uploads/REST" in the owner's upload directory,
// anything else under the data root.
std::string ResolveDataPath(const std::string& data_root, const std::string& owner,
                            const std::string& spec_path);

// Bytes used by the principal's uploads.
int64_t UploadBytesUsed(const std::string& data_root, const std::string& principal);

}  // namespace ampd::server

#endif  // AMPD_SERVER_UPLOADS_H_
