#!/usr/bin/env node
// s3rver 3.7.1 with real AWS SigV4 checking in front of it, for wmap's remote-source tests.
//
// s3rver alone only checks that a SigV4 request names a known access key: it never recomputes
// the signature ("Signature version 4 calculation is unimplemented" in its authentication.js),
// and it serves anonymous requests. This wrapper recomputes every header-signed request's
// signature as AWS documents it (canonical request over the headers the client lists in
// SignedHeaders, so a proxy must pass Host through unchanged) and answers 403 like S3 does:
// SignatureDoesNotMatch, InvalidAccessKeyId, or AccessDenied for unsigned requests unless
// --allow-anonymous. Query-string (presigned) auth is refused: the tests do not use it.
// The payload hash is taken from x-amz-content-sha256 as sent; the body is not re-hashed.
// Object checksums, as S3 keeps them for an object uploaded with one: the x-amz-checksum-sha256
// a PUT sends is stored with the key and returned (with x-amz-checksum-type: FULL_OBJECT) by a
// whole-object GET or a HEAD that asks with x-amz-checksum-mode: ENABLED; a ranged GET gets none,
// as from S3. (S3 also checks the sum against the body; this server does not.)
//
//   node s3_server.js --directory DIR [--address 127.0.0.1] [--port 0] [--allow-anonymous]
// Prints the bound port as its first stdout line.
'use strict';

const crypto = require('crypto');

// s3rver's ListObjectsV2 continuation tokens use single DES ('des'), which OpenSSL 3 keeps in
// its legacy provider: node 18+ answers those lists with 500. Three-key DES with three equal keys
// is single DES, and OpenSSL 3 has it by default: same tokens, no --openssl-legacy-provider.
for (const name of ['createCipheriv', 'createDecipheriv']) {
  const original = crypto[name];
  crypto[name] = (alg, key, iv, options) =>
    alg === 'des' ? original('des-ede3-cbc', Buffer.concat([key, key, key]), iv, options)
                  : original(alg, key, iv, options);
}

const S3rver = require('s3rver');
const S3Error = require('s3rver/lib/models/error');

const ACCESS_KEY = 'S3RVER';  // s3rver's built-in account
const SECRET_KEY = 'S3RVER';

function parseArgs(argv) {
  const opts = { address: '127.0.0.1', port: 0, directory: undefined, allowAnonymous: false };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === '--allow-anonymous') opts.allowAnonymous = true;
    else if (a === '--address') opts.address = argv[++i];
    else if (a === '--port') opts.port = Number(argv[++i]);
    else if (a === '--directory') opts.directory = argv[++i];
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.directory) throw new Error('--directory is required');
  return opts;
}

// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - _ . ~ is %XX.
function uriEncode(s) {
  return encodeURIComponent(s).replace(/[!'()*]/g, c => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}
function decode(s) {
  try {
    return decodeURIComponent(s);  // '+' stays literal, as S3 reads it
  } catch (e) {
    return s;
  }
}

function canonicalQuery(raw) {
  if (!raw) return '';
  return raw
    .split('&')
    .filter(p => p.length > 0)
    .map(p => {
      const eq = p.indexOf('=');
      const k = eq < 0 ? p : p.slice(0, eq), v = eq < 0 ? '' : p.slice(eq + 1);
      return [uriEncode(decode(k)), uriEncode(decode(v))];
    })
    .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0) : a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

const hmac = (key, data) => crypto.createHmac('sha256', key).update(data, 'utf8').digest();
const sha256hex = data => crypto.createHash('sha256').update(data, 'utf8').digest('hex');

// Throws S3Error unless the request carries a valid header SigV4 signature (or is anonymous
// and that is allowed).
function verify(req, allowAnonymous) {
  const auth = req.headers['authorization'];
  const url = req.url;
  const q = url.indexOf('?');
  const rawPath = q < 0 ? url : url.slice(0, q), rawQuery = q < 0 ? '' : url.slice(q + 1);
  if (/(^|&)X-Amz-Algorithm=/i.test(rawQuery)) {
    throw new S3Error('AccessDenied', 'Query-string authentication is not supported by this test server');
  }
  if (!auth) {
    if (allowAnonymous) return;
    throw new S3Error('AccessDenied', 'Access Denied');
  }
  const m = /^AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})\s*$/.exec(auth);
  if (!m) throw new S3Error('AccessDenied', 'Only AWS4-HMAC-SHA256 header authentication is accepted');
  const [, credential, signedHeaders, signature] = m;
  const [accessKey, date, region, service, terminator] = credential.split('/');
  if (accessKey !== ACCESS_KEY) {
    throw new S3Error('InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.');
  }
  const amzDate = req.headers['x-amz-date'];
  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!amzDate || !payloadHash || terminator !== 'aws4_request' || !amzDate.startsWith(date)) {
    throw new S3Error('AccessDenied', 'Malformed SigV4 credential scope, x-amz-date or x-amz-content-sha256');
  }
  const names = signedHeaders.split(';');
  if (!names.includes('host')) throw new S3Error('AccessDenied', 'host must be a signed header');
  const canonicalHeaders = names
    .map(n => `${n}:${String(req.headers[n] ?? '').trim().replace(/\s+/g, ' ')}\n`)
    .join('');
  const canonicalPath = rawPath.split('/').map(seg => uriEncode(decode(seg))).join('/');
  const canonicalRequest = [req.method, canonicalPath, canonicalQuery(rawQuery), canonicalHeaders, signedHeaders,
                            payloadHash].join('\n');
  const scope = `${date}/${region}/${service}/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256hex(canonicalRequest)].join('\n');
  const key = hmac(hmac(hmac(hmac('AWS4' + SECRET_KEY, date), region), service), 'aws4_request');
  const expected = hmac(key, stringToSign).toString('hex');
  if (!crypto.timingSafeEqual(Buffer.from(expected), Buffer.from(signature))) {
    throw new S3Error('SignatureDoesNotMatch',
                      'The request signature we calculated does not match the signature you provided. ' +
                          'Check your key and signing method.',
                      { CanonicalRequest: canonicalRequest, StringToSign: stringToSign });
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const server = new S3rver({ address: opts.address, port: opts.port, directory: opts.directory, silent: true });
  // Koa composes app.middleware when it starts listening: insert the check just before
  // s3rver's router (the last middleware), after its XML error rendering.
  const checksums = new Map();  // "/bucket/key" -> base64 SHA-256 given at upload
  server.middleware.splice(server.middleware.length - 1, 0, async (ctx, next) => {
    verify(ctx.req, opts.allowAnonymous);
    const path = decode(ctx.req.url.split('?')[0]);
    const sum = ctx.req.headers['x-amz-checksum-sha256'];
    await next();
    if (ctx.req.method === 'PUT' && ctx.status === 200) {
      if (sum) checksums.set(path, sum); else checksums.delete(path);
    }
    if ((ctx.req.method === 'GET' || ctx.req.method === 'HEAD') && checksums.has(path) &&
        String(ctx.req.headers['x-amz-checksum-mode'] || '').toUpperCase() === 'ENABLED' && !ctx.req.headers['range']) {
      ctx.set('x-amz-checksum-sha256', checksums.get(path));
      ctx.set('x-amz-checksum-type', 'FULL_OBJECT');
    }
  });
  const { port } = await server.run();
  process.stdout.write(`${port}\n`);
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
