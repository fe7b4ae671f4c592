# One security group per role (plus "admin" on every host). Ingress opens only what each role serves,
# and only to the roles that use it. Cross-datacenter rules (the offline mirror reading the live
# cluster) are added by the root module, which knows both datacenters.

locals {
  roles = ["zookeeper", "broker", "mirror", "loader", "spark_worker"]
  # The Spark workers' executors read the brokers and the schema registry (ZooKeeper) like the loaders.
  spark_clients = var.spark_worker_count > 0 ? ["spark_worker"] : []
  # Roles of this datacenter that are ZooKeeper / broker clients.
  zookeeper_clients = concat(["broker"], var.mirror_count > 0 ? ["mirror"] : [], var.loader_count > 0 ? ["loader"] : [],
  local.spark_clients)
  broker_clients = concat(["broker"], var.mirror_count > 0 ? ["mirror"] : [], var.loader_count > 0 ? ["loader"] : [],
  local.spark_clients)
  # The one Kafka port opened: SASL_SSL's unless the deployment is plaintext (var.security).
  kafka_port = var.security == "plaintext" ? var.ports.broker : var.ports.broker_tls
  # ZooKeeper's: its TLS port (secureClientPort) with var.zookeeper_tls; the plaintext one then stays on loopback.
  zookeeper_port = var.zookeeper_tls && var.security != "plaintext" ? var.ports.zookeeper_tls : var.ports.zookeeper
}

resource "aws_security_group" "admin" {
  name        = "ferry-${var.name}-admin"
  description = "ferry ${var.name}: SSH from the operators"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "ferry-${var.name}-admin" })
}

resource "aws_security_group" "role" {
  for_each    = toset(local.roles)
  name        = "ferry-${var.name}-${each.key}"
  description = "ferry ${var.name}: ${each.key} hosts"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "ferry-${var.name}-${each.key}", Role = each.key })
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each          = toset(var.admin_cidr_blocks)
  security_group_id = aws_security_group.admin.id
  description       = "SSH (Ansible) from ${each.key}"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = each.key
}

# ZooKeeper: clients on local.zookeeper_port (2281 with TLS, else 2181) from the roles that use it; quorum and election only among the servers.
resource "aws_vpc_security_group_ingress_rule" "zookeeper_client" {
  for_each                     = toset(local.zookeeper_clients)
  security_group_id            = aws_security_group.role["zookeeper"].id
  description                  = "ZooKeeper clients: ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = local.zookeeper_port
  to_port                      = local.zookeeper_port
  referenced_security_group_id = aws_security_group.role[each.key].id
}

resource "aws_vpc_security_group_ingress_rule" "zookeeper_quorum" {
  for_each                     = var.zookeeper_count > 1 ? toset([tostring(var.ports.zookeeper_peer), tostring(var.ports.zookeeper_election)]) : toset([])
  security_group_id            = aws_security_group.role["zookeeper"].id
  description                  = "ZooKeeper ensemble port ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = tonumber(each.key)
  to_port                      = tonumber(each.key)
  referenced_security_group_id = aws_security_group.role["zookeeper"].id
}

# Brokers: the Kafka protocol (SASL_SSL) from the other brokers (replication), this datacenter's mirror and
# loaders, and from app servers.
resource "aws_vpc_security_group_ingress_rule" "broker_from_role" {
  for_each                     = toset(local.broker_clients)
  security_group_id            = aws_security_group.role["broker"].id
  description                  = "Kafka protocol: ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = local.kafka_port
  to_port                      = local.kafka_port
  referenced_security_group_id = aws_security_group.role[each.key].id
}

resource "aws_vpc_security_group_ingress_rule" "broker_from_clients" {
  for_each          = toset(var.client_cidr_blocks)
  security_group_id = aws_security_group.role["broker"].id
  description       = "Kafka protocol: producers and consumers in ${each.key}"
  ip_protocol       = "tcp"
  from_port         = local.kafka_port
  to_port           = local.kafka_port
  cidr_ipv4         = each.key
}

# Airflow's UI and API on the loaders, for the operators only.
resource "aws_vpc_security_group_ingress_rule" "airflow" {
  for_each          = var.loader_count > 0 ? toset(var.admin_cidr_blocks) : toset([])
  security_group_id = aws_security_group.role["loader"].id
  description       = "Airflow UI from ${each.key}"
  ip_protocol       = "tcp"
  from_port         = var.ports.airflow
  to_port           = var.ports.airflow
  cidr_ipv4         = each.key
}

# `ferry dashboard` and Prometheus on the loaders, for the operators only.
resource "aws_vpc_security_group_ingress_rule" "loader_ui" {
  for_each = var.loader_count > 0 ? {
    for pair in setproduct(["dashboard", "prometheus"], var.admin_cidr_blocks) :
    "${pair[0]} ${pair[1]}" => { service = pair[0], cidr = pair[1] }
  } : {}
  security_group_id = aws_security_group.role["loader"].id
  description       = "${each.value.service} from ${each.value.cidr}"
  ip_protocol       = "tcp"
  from_port         = var.ports[each.value.service]
  to_port           = var.ports[each.value.service]
  cidr_ipv4         = each.value.cidr
}

# Prometheus on the loaders scrapes every broker's and mirror's /metrics (docs/infra.md "Monitoring"); the
# root module adds the live brokers' metrics port for the offline loaders.
resource "aws_vpc_security_group_ingress_rule" "metrics_from_loader" {
  for_each = var.loader_count > 0 ? merge(
    { broker = var.ports.broker_metrics },
    var.mirror_count > 0 ? { mirror = var.ports.mirror_metrics } : {},
  ) : {}
  security_group_id            = aws_security_group.role[each.key].id
  description                  = "Prometheus metrics of the ${each.key}s: the loaders' Prometheus"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = aws_security_group.role["loader"].id
}

# The Spark cluster of the loads (docs/infra.md "Spark cluster"): the master runs on the first loader. Its RPC
# port from the loaders (drivers) and the workers; its web UI (/json/) and REST port from the loaders and the
# operators only. The drivers (loaders, fixed ports) from the workers' executors; the workers (RPC, executors'
# and block managers' ports are Spark's random ones) from the loaders and each other; worker UIs for operators.
locals {
  spark_enabled = var.loader_count > 0 && var.spark_worker_count > 0
  spark_master_from_roles = local.spark_enabled ? {
    for pair in setproduct(["master"], ["loader", "spark_worker"]) : "${pair[0]} ${pair[1]}" => { port = pair[0], role = pair[1] }
  } : {}
  spark_ui_from_loader = local.spark_enabled ? { master_ui = "loader", master_rest = "loader" } : {}
  spark_ui_from_admin = local.spark_enabled ? {
    for pair in setproduct(["master_ui", "master_rest"], var.admin_cidr_blocks) : "${pair[0]} ${pair[1]}" => { port = pair[0], cidr = pair[1] }
  } : {}
  spark_driver_ports = local.spark_enabled ? toset(["driver", "block_manager"]) : toset([])
  spark_worker_peers = local.spark_enabled ? toset(["loader", "spark_worker"]) : toset([])
}

resource "aws_vpc_security_group_ingress_rule" "spark_master_rpc" {
  for_each                     = local.spark_master_from_roles
  security_group_id            = aws_security_group.role["loader"].id
  description                  = "Spark master RPC: ${each.value.role}"
  ip_protocol                  = "tcp"
  from_port                    = var.spark_ports[each.value.port]
  to_port                      = var.spark_ports[each.value.port]
  referenced_security_group_id = aws_security_group.role[each.value.role].id
}

resource "aws_vpc_security_group_ingress_rule" "spark_master_ui_from_loader" {
  for_each                     = local.spark_ui_from_loader
  security_group_id            = aws_security_group.role["loader"].id
  description                  = "Spark master ${each.key}: loaders"
  ip_protocol                  = "tcp"
  from_port                    = var.spark_ports[each.key]
  to_port                      = var.spark_ports[each.key]
  referenced_security_group_id = aws_security_group.role[each.value].id
}

resource "aws_vpc_security_group_ingress_rule" "spark_master_ui_from_admin" {
  for_each          = local.spark_ui_from_admin
  security_group_id = aws_security_group.role["loader"].id
  description       = "Spark master ${each.value.port} from ${each.value.cidr}"
  ip_protocol       = "tcp"
  from_port         = var.spark_ports[each.value.port]
  to_port           = var.spark_ports[each.value.port]
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_ingress_rule" "spark_driver_from_workers" {
  for_each                     = local.spark_driver_ports
  security_group_id            = aws_security_group.role["loader"].id
  description                  = "Spark driver ${each.key} port: the workers' executors"
  ip_protocol                  = "tcp"
  from_port                    = var.spark_ports[each.key]
  to_port                      = var.spark_ports[each.key]
  referenced_security_group_id = aws_security_group.role["spark_worker"].id
}

resource "aws_vpc_security_group_ingress_rule" "spark_worker_from_peers" {
  for_each                     = local.spark_worker_peers
  security_group_id            = aws_security_group.role["spark_worker"].id
  description                  = "Spark worker and executor ports (Spark's random ones): ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = 1024
  to_port                      = 65535
  referenced_security_group_id = aws_security_group.role[each.key].id
}

resource "aws_vpc_security_group_ingress_rule" "spark_worker_ui" {
  for_each          = local.spark_enabled ? toset(var.admin_cidr_blocks) : toset([])
  security_group_id = aws_security_group.role["spark_worker"].id
  description       = "Spark worker UI (executor logs) from ${each.key}"
  ip_protocol       = "tcp"
  from_port         = var.spark_ports.worker_ui
  to_port           = var.spark_ports.worker_ui
  cidr_ipv4         = each.key
}

# Outbound: package mirrors (through the NAT gateway) and the other roles.
resource "aws_vpc_security_group_egress_rule" "all" {
  for_each          = toset(concat(["admin"], local.roles))
  security_group_id = each.key == "admin" ? aws_security_group.admin.id : aws_security_group.role[each.key].id
  description       = "all outbound"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}
