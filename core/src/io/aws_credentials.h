#pragma once
// S3 credentials, found where AWS's own SDKs look (botocore's default chain, in its order):
//   1. --s3-no-sign: unsigned requests, nothing looked up;
//   2. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   3. web identity (EKS IRSA): AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME),
//      or the profile's web_identity_token_file + role_arn: STS AssumeRoleWithWebIdentity
//      (AWS_ENDPOINT_URL_STS, else the regional STS endpoint), an unsigned request;
//   4. the profile (AWS_PROFILE, else "default") in the shared credentials file
//      (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials), then in the config file
//      (AWS_CONFIG_FILE, else ~/.aws/config);
//   5. the container endpoint (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
//      (http://169.254.170.2) or AWS_CONTAINER_CREDENTIALS_FULL_URI, with the Authorization
//      header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or AWS_CONTAINER_AUTHORIZATION_TOKEN;
//   6. the instance metadata service, IMDSv2 (a session token first; AWS_EC2_METADATA_SERVICE_ENDPOINT,
//      else http://169.254.169.254; off with AWS_EC2_METADATA_DISABLED=true), one attempt, 1 s;
//   7. none: unsigned requests (a private bucket answers 403, naming this).
// Looked up on the first S3 request, not before; temporary credentials (3, 5, 6) are fetched
// again five minutes before they expire. Sources are named in errors with the key id masked to
// its last four characters; a secret or token never appears. Internal to the io stage.

#include <memory>
#include <mutex>

#include "http_transfer.h"
#include "remote_location.h"

namespace wmap::remote {

class S3Credentials final : public CredentialSource {
 public:
  S3Credentials(const RemoteOptions& options, TransferContext ctx) : options_(options), ctx_(ctx) {}
  std::shared_ptr<const Auth> current() const override;
  // The region requests are signed for and addressed to: options.s3_region, else the profile's,
  // else us-east-1 (known without any request).
  std::string region() const;

 private:
  std::shared_ptr<const Auth> resolve() const;
  const RemoteOptions& options_;
  TransferContext ctx_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Auth> auth_;
};

}  // namespace wmap::remote
