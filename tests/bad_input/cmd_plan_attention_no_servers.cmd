plan
attention
--docs
16/8
--servers
0
