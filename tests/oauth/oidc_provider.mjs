// A real OpenID provider (npm `oidc-provider`) on loopback, for the OAuth tests.
// Config (JSON file, argv[2]): {port, issuer, jwks: {keys: [private JWK]}, scopes: [...],
// users: {id: {claims}}, accessTokenTTL}. Every resource indicator is a resource server whose
// access tokens are JWTs (RFC 9068) with aud = the indicator. Logins are non-interactive: the
// interaction URL logs in `login_hint` (default alice) and grants what was asked.
import fs from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const users = config.users;

const provider = new Provider(config.issuer, {
  jwks: config.jwks,
  clients: config.clients || [],
  scopes: ['openid', 'offline_access', ...config.scopes],
  claims: { openid: ['sub'], email: ['email'] },
  findAccount: async (ctx, id) => (users[id] ? { accountId: id, claims: async () => ({ sub: id, ...users[id] }) } : undefined),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resourceIndicator) => ({
        scope: config.scopes.join(' '),
        audience: resourceIndicator,
        accessTokenTTL: config.accessTokenTTL || 300,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  extraTokenClaims: async (ctx, token) => {
    const user = users[token.accountId];
    return user ? { tenant: user.tenant, groups: user.groups } : undefined;
  },
  pkce: { required: () => true },
  ttl: { AccessToken: 300, AuthorizationCode: 60, Grant: 3600, Interaction: 300, Session: 3600 },
  renderError: async (ctx, out) => { ctx.type = 'json'; ctx.body = out; },
});
provider.proxy = false;

provider.use(async (ctx, next) => {
  if (!ctx.path.startsWith('/interaction/')) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    const user = params.login_hint || 'alice';
    if (!users[user]) { ctx.status = 403; ctx.body = { error: 'unknown user' }; return; }
    result = { login: { accountId: user } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const d = prompt.details;
    if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
    if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
    if (d.missingResourceScopes) {
      for (const [indicator, scopes] of Object.entries(d.missingResourceScopes)) grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  const to = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });
  ctx.redirect(to);
});

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log('READY ' + config.issuer);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
