# One security group per role (plus "admin" on every host). Ingress opens only what each role serves,
# and only to the roles that use it. Cross-datacenter rules (the offline mirror reading the live
# cluster) are added by the root module, which knows both datacenters.

locals {
  roles = ["zookeeper", "broker", "mirror", "loader"]
  # Roles of this datacenter that are ZooKeeper / broker clients.
  zookeeper_clients = concat(["broker"], var.mirror_count > 0 ? ["mirror"] : [], var.loader_count > 0 ? ["loader"] : [])
  broker_clients    = concat(["broker"], var.mirror_count > 0 ? ["mirror"] : [], var.loader_count > 0 ? ["loader"] : [])
  # The one Kafka port opened: SASL_SSL's unless the deployment is plaintext (var.security).
  kafka_port = var.security == "plaintext" ? var.ports.broker : var.ports.broker_tls
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

# ZooKeeper: clients on 2181 from the roles that use it; quorum and election only among the servers.
resource "aws_vpc_security_group_ingress_rule" "zookeeper_client" {
  for_each                     = toset(local.zookeeper_clients)
  security_group_id            = aws_security_group.role["zookeeper"].id
  description                  = "ZooKeeper clients: ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = var.ports.zookeeper
  to_port                      = var.ports.zookeeper
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

# Outbound: package mirrors (through the NAT gateway) and the other roles.
resource "aws_vpc_security_group_egress_rule" "all" {
  for_each          = toset(concat(["admin"], local.roles))
  security_group_id = each.key == "admin" ? aws_security_group.admin.id : aws_security_group.role[each.key].id
  description       = "all outbound"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}
